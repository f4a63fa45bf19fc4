package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"
)

// knobs are the soak's settings, from SOAK_* environment variables.
type knobs struct {
	duration  time.Duration // SOAK_DURATION (required: without it the soak is skipped)
	threads   int           // SOAK_THREADS (50)
	seed      uint64        // SOAK_SEED (from the clock)
	killEvery time.Duration // SOAK_KILL_EVERY: mean time between SIGKILLs of the broker (60s; 0: never)
	dropEvery time.Duration // SOAK_DROP_EVERY: mean time between gateway faults (20s; 0: never)
	rate429   float64       // SOAK_RATE_429: share of REST calls answered 429 at random (0.02)
	rateErr   float64       // SOAK_RATE_5XX: share answered with a 5xx (0.01)
	statuses  []int         // SOAK_5XX: the 5xx statuses, in turn (502, which discordgo retries)
	logDir    string        // SOAK_LOG_DIR: where the broker logs are kept (a new directory under $TMPDIR)
	// slackThreads are the Slack threads beside Discord's, in the same
	// broker (SOAK_SLACK_THREADS, 6; 0: Discord alone).
	slackThreads int
}

func readKnobs(t *testing.T) knobs {
	k := knobs{threads: 50, seed: uint64(time.Now().UnixNano()), killEvery: 60 * time.Second, dropEvery: 20 * time.Second,
		rate429: 0.02, rateErr: 0.01, statuses: []int{502}, slackThreads: 6}
	env := func(name string, parse func(string) error) {
		if v := os.Getenv(name); v != "" {
			if err := parse(v); err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
		}
	}
	dur := func(dst *time.Duration) func(string) error {
		return func(s string) (err error) { *dst, err = time.ParseDuration(s); return err }
	}
	float := func(dst *float64) func(string) error {
		return func(s string) (err error) { *dst, err = strconv.ParseFloat(s, 64); return err }
	}
	env("SOAK_DURATION", dur(&k.duration))
	env("SOAK_THREADS", func(s string) (err error) { k.threads, err = strconv.Atoi(s); return err })
	env("SOAK_SLACK_THREADS", func(s string) (err error) { k.slackThreads, err = strconv.Atoi(s); return err })
	env("SOAK_SEED", func(s string) (err error) { k.seed, err = strconv.ParseUint(s, 10, 64); return err })
	env("SOAK_KILL_EVERY", dur(&k.killEvery))
	env("SOAK_DROP_EVERY", dur(&k.dropEvery))
	env("SOAK_RATE_429", float(&k.rate429))
	env("SOAK_RATE_5XX", float(&k.rateErr))
	env("SOAK_5XX", func(s string) error {
		k.statuses = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 500 || n > 599 {
				return fmt.Errorf("%q is not a 5xx status", f)
			}
			k.statuses = append(k.statuses, n)
		}
		return nil
	})
	k.logDir = os.Getenv("SOAK_LOG_DIR")
	return k
}

// Short knobs, so that every outcome happens within a few seconds.
var brokerConf = brokertest.Settings{
	"agent.args":              []string{"--load-session", "--config-options"},
	"agent.exit_grace":        "500ms",
	"turn.timeout":            "20s",
	"turn.cancel_grace":       "2s",
	"turn.permission_timeout": "4s",
	"turn.tool_timeout":       "15s",
	"watchdog.interval":       "2s",
	"pool.max_sessions":       16,
	"pool.idle_timeout":       "5s",
	"pool.slot_wait":          "60s",
	"shutdown.grace":          "10s",
}

// A behaviour is what a prompt asks the fake agent to do.
type behaviour struct {
	name   string
	weight int
	text   func(r *rand.Rand) string
}

func fixed(s string) func(*rand.Rand) string { return func(*rand.Rand) string { return s } }

var behaviours = []behaviour{
	{"answer", 20, func(r *rand.Rand) string { return fmt.Sprintf("stream %d 50ms", 1+r.IntN(5)) }},
	{"demo", 8, func(r *rand.Rand) string { return fmt.Sprintf("tell me about item %d", r.IntN(1000)) }},
	{"stream slowly", 10, func(r *rand.Rand) string { return fmt.Sprintf("slow %dms %d", 300+r.IntN(500), 3+r.IntN(8)) }},
	{"long answer", 4, func(r *rand.Rand) string { return fmt.Sprintf("code %d", 60+r.IntN(200)) }},
	{"answer late", 8, func(r *rand.Rand) string { return fmt.Sprintf("late %dms answered late", 1000+r.IntN(4000)) }},
	{"crash", 6, fixed("crash")},
	{"exit without answer", 3, fixed("exit-after 1s")},
	{"hang", 8, fixed("hang")},
	{"hang ignoring cancel", 6, fixed("ignore-cancel")},
	{"print junk", 6, fixed("junk")},
	{"permission clicked", 8, fixed("permission")},
	{"permission timed out", 5, fixed("permission")},
	{"question answered", 4, fixed("elicit-url")},
	{"question timed out", 3, fixed("elicit-form")},
	{"terminal", 4, func(r *rand.Rand) string { return fmt.Sprintf("terminal echo run %d", r.IntN(1000)) }},
	{"terminal until cancel", 4, fixed("terminal-long")},
}

// models are the fake agent's models, chosen now and then with /model.
var models = []string{"fake-small", "fake-large", "fake-huge"}

func pick(r *rand.Rand) behaviour {
	total := 0
	for _, b := range behaviours {
		total += b.weight
	}
	n := r.IntN(total)
	for _, b := range behaviours {
		if n < b.weight {
			return b
		}
		n -= b.weight
	}
	panic("unreachable")
}

// prompt is one message a user sent, and what became of it.
type prompt struct {
	id, channel, thread string // channel holds the message: the thread, or for the first one the allowed channel
	behaviour           string
	sent                time.Time

	// guarded by soak.mu
	acked     bool   // the broker reacted to it
	lost      bool   // not acknowledged when the broker was killed: it may never have reached it
	stuck     bool   // reported stuck; not waited for again
	outcome   string // the final reaction, once resolved
	outcomeAt time.Time
}

type thread struct {
	id      string
	starter fakediscord.User
	rng     *rand.Rand
	prompts []*prompt // guarded by soak.mu
}

type soak struct {
	t     *testing.T
	k     knobs
	w     *brokertest.World
	d     brokertest.Discord
	start time.Time
	end   time.Time

	aborted atomic.Bool    // the broker could not be restarted
	checks  sync.WaitGroup // checks that run on after a restart

	// gate is held for reading while users act on Discord and for
	// writing while the broker is killed and restarted: messages sent
	// to a dead broker are lost on Discord as well.
	gate sync.RWMutex

	mu         sync.Mutex
	broker     *brokertest.Broker
	brokers    []*brokertest.Broker
	threads    []*thread
	prompts    []*prompt
	violations []string
	bad        map[string]bool // threads named by a violation
	events     map[string]int
	interact   []string // interactions answered late or refused
	restarts   []time.Duration
	kills      []time.Time
	peakGor    float64
	peakRSS    int64
	rateLimitd float64    // 429s the broker counted, summed over its processes
	slack      *slackSide // nil without Slack threads
}

var threadRef = regexp.MustCompile(`thread (?:of )?([0-9]+)`)

func (s *soak) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	for _, m := range threadRef.FindAllStringSubmatch(msg, -1) {
		s.bad[m[1]] = true
	}
	s.mu.Unlock()
	fmt.Printf("%s VIOLATION %s\n", time.Since(s.start).Round(time.Second), msg)
}

func (s *soak) count(event string) {
	s.mu.Lock()
	s.events[event]++
	s.mu.Unlock()
}

func (s *soak) current() *brokertest.Broker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broker
}

func TestSoak(t *testing.T) {
	if os.Getenv("SOAK_DURATION") == "" {
		t.Skip("the chaos soak runs with SOAK_DURATION set (make soak)")
	}
	k := readKnobs(t)
	dir, err := os.MkdirTemp("", "soak-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bins, err := brokertest.Build(dir)
	if err == nil {
		err = os.Chmod(dir, 0o755) // as root, agents run as another user
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, k: k, events: map[string]int{}, bad: map[string]bool{}}
	opts := brokertest.Options{
		// Discord's own limits: 5 messages and 5 edits per 5s per channel.
		Fake:    fakediscord.Options{WaitTimeout: time.Minute, MaxRequests: 50000, MaxBacklog: 2000},
		Conf:    brokerConf,
		LogTail: -1, // the logs are kept whole in files
	}
	if k.slackThreads > 0 {
		// Slack's own limits too, in one broker with Discord.
		opts.Slack = &fakeslack.Options{WaitTimeout: time.Minute, MaxCalls: 50000, MaxEnvelopes: 20000}
		opts.Conf = opts.Conf.With(brokertest.Settings{"chat.platform": []string{"discord", "slack"}})
	}
	s.w = brokertest.NewWorld(t, bins, opts)
	s.d = s.w.Discord
	if k.slackThreads > 0 {
		s.slack = &slackSide{sl: s.w.Slack}
	}
	defer s.keepLogs()
	s.run()
}

func (s *soak) run() {
	t, k := s.t, s.k
	ctx := context.Background()
	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b, err := s.w.Start(startCtx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	s.broker = b
	s.brokers = append(s.brokers, b)
	baseGor, baseRSS := s.baseline(b)
	fmt.Printf("chaos soak: %s, %d threads, seed %d; broker pid %d, %.0f goroutines and %s RSS at rest\n",
		k.duration, k.threads, k.seed, b.PID(), baseGor, mib(baseRSS))

	s.w.Srv.SetChaos(fakediscord.Chaos{Seed: k.seed, Rate429: k.rate429, RateError: k.rateErr, ErrorStatuses: k.statuses})
	if s.slack != nil {
		s.slack.sl.Srv.SetChaos(fakeslack.Chaos{Seed: k.seed, Rate429: k.rate429, RateError: k.rateErr})
		fmt.Printf("with %d Slack threads in the same broker\n", k.slackThreads)
	}
	s.start = time.Now()
	s.end = s.start.Add(k.duration)

	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	bgWG.Go(func() { s.sample(bg) })
	bgWG.Go(func() { s.progress(bg) })
	if k.killEvery > 0 {
		bgWG.Go(func() { s.killer(bg, stopBG) })
	}
	if k.dropEvery > 0 {
		bgWG.Go(func() { s.gatewayFaults(bg) })
		if s.slack != nil {
			bgWG.Go(func() { s.slackFaults(bg) })
		}
	}
	var users sync.WaitGroup
	users2 := []fakediscord.User{brokertest.Alice, brokertest.Bob, brokertest.Carol}
	for i := range k.threads {
		th := &thread{starter: users2[i%3], rng: rand.New(rand.NewPCG(k.seed, uint64(i)+1))}
		users.Go(func() { s.user(ctx, th) })
	}
	for i := range k.slackThreads {
		th := &slackThread{starter: s.w.Slack.User([]string{"alice", "bob", "carol"}[i%3]), rng: rand.New(rand.NewPCG(k.seed, uint64(0x51ac0000+i)))}
		users.Go(func() { s.slackUser(ctx, th) })
	}
	users.Wait()
	stopBG()
	bgWG.Wait()
	s.checks.Wait()
	if s.aborted.Load() {
		for _, v := range s.violations {
			t.Error(v)
		}
		t.FailNow()
	}
	s.w.Srv.SetChaos(fakediscord.Chaos{})
	if s.slack != nil {
		s.slack.sl.Srv.SetChaos(fakeslack.Chaos{})
	}
	fmt.Printf("%s load ended; probing every thread\n", time.Since(s.start).Round(time.Second))

	var probes sync.WaitGroup
	probes.Go(func() { s.probe(ctx) })
	if s.slack != nil {
		probes.Go(func() { s.slackProbe(ctx) })
	}
	probes.Wait()
	s.checkOutcomes()
	if s.slack != nil {
		s.slackCheckOutcomes(ctx)
	}
	b = s.current()
	s.checkQuiet(ctx, b, baseGor, baseRSS)
	if m, err := b.Metrics(ctx); err == nil {
		s.mu.Lock()
		s.rateLimitd += m[`acp_broker_chat_rate_limited_total{platform="discord"}`]
		s.mu.Unlock()
	}
	stopStart := time.Now()
	code, err := b.Stop(30 * time.Second)
	stopTook := time.Since(stopStart)
	if err != nil || code != 0 {
		s.violate("the broker's SIGTERM stop: status %d, %v, after %s", code, err, stopTook.Round(time.Millisecond))
	}
	if left := s.w.LeftoverAgents(5 * time.Second); len(left) > 0 {
		s.violate("agent processes survived the broker: %v", left)
	}
	s.summary(stopTook)
	for _, v := range s.violations {
		t.Error(v)
	}
}

// baseline waits for a broker at rest and reads its goroutines and RSS.
func (s *soak) baseline(b *brokertest.Broker) (float64, int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.Sleep(time.Second) // let start-up work settle
	m, err := b.Metrics(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	rss, err := b.RSS()
	if err != nil {
		s.t.Fatal(err)
	}
	if _, ok := m["go_goroutines"]; !ok {
		s.t.Fatal("/metrics has no go_goroutines")
	}
	return m["go_goroutines"], rss
}

// user plays one thread's user until the soak's end.
func (s *soak) user(ctx context.Context, th *thread) {
	r := th.rng
	s.play(player{
		rng:       r,
		who:       "user",
		busyOneIn: 4,
		send: func(kind, text string, first bool) (func(), bool) {
			p, ok := s.send(ctx, th, kind, text, first)
			return func() { s.cancel(ctx, th, p) }, ok
		},
		click: func(what string) {
			if what == "permission" {
				s.click(ctx, th, what, isPermission, "Allow")
			} else {
				s.click(ctx, th, what, isLinkQuestion, "Done")
			}
		},
		model: func() { s.chooseModel(ctx, th, models[r.IntN(len(models))]) },
		reset: func() { s.slash(ctx, th, "reset") },
		await: func() { s.awaitOutcomes(ctx, th, 150*time.Second) },
		rest: func() {
			if r.IntN(15) == 0 {
				s.slash(ctx, th, "reset")
			}
			time.Sleep(time.Duration(r.IntN(2000)) * time.Millisecond)
		},
	})
}

// send posts a prompt (the first one mentions the bot in the channel
// and opens the thread).
func (s *soak) send(ctx context.Context, th *thread, kind, text string, first bool) (*prompt, bool) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	p := &prompt{behaviour: kind, sent: time.Now()}
	if first {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		id, err := s.d.Mention(wctx, th.starter, text)
		cancel()
		if err != nil {
			s.violate("thread of %s: %v", id, err)
			return nil, false
		}
		th.id = id
		p.id, p.channel, p.thread = id, s.w.Channel, id
		s.mu.Lock()
		s.threads = append(s.threads, th)
		s.mu.Unlock()
	} else {
		p.id, p.channel, p.thread = s.d.Post(th.id, th.starter, text), th.id, th.id
	}
	s.mu.Lock()
	th.prompts = append(th.prompts, p)
	s.prompts = append(s.prompts, p)
	s.events["behaviour: "+kind]++
	s.mu.Unlock()
	return p, true
}

// slash has the thread's starter run a slash command in it.
func (s *soak) slash(ctx context.Context, th *thread, name string) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	s.count("user: /" + name)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.d.Slash(wctx, th.id, th.starter, name); err != nil {
		s.mu.Lock()
		s.interact = append(s.interact, fmt.Sprintf("thread %s: %v", th.id, err))
		s.mu.Unlock()
	}
}

// cancel stops a prompt's turn: /cancel or a 🛑 reaction on the prompt.
func (s *soak) cancel(ctx context.Context, th *thread, p *prompt) {
	if th.rng.IntN(2) == 0 {
		s.slash(ctx, th, "cancel")
		return
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	s.count("user: 🛑 reaction")
	s.w.Srv.AddReaction(p.channel, p.id, th.starter.ID, "🛑")
}

// isPermission and isLinkQuestion tell a permission request and a
// question with a link from the bot's other messages.
func isPermission(m fakediscord.Message) bool {
	return strings.HasPrefix(m.Content, brokertest.PermissionPrefix+" **Permission needed**")
}

func isLinkQuestion(m fakediscord.Message) bool {
	return strings.HasPrefix(m.Content, "🔗 **The agent asks you to open a link**")
}

// click waits for the thread's next request of a kind (a permission
// request, a question) and clicks its button labelled label.
func (s *soak) click(ctx context.Context, th *thread, what string, is func(fakediscord.Message) bool, label string) {
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for _, m := range s.w.Srv.Messages(th.id) {
		if is(m) {
			seen[m.ID] = true
		}
	}
	var req fakediscord.Message
	err := s.w.Srv.WaitFor(wctx, func() bool {
		for _, m := range s.w.Srv.Messages(th.id) {
			if is(m) && !seen[m.ID] && len(m.Buttons()) > 0 {
				req = m
				return true
			}
		}
		return false
	})
	if err != nil {
		s.count("user: " + what + " not seen (turn ended first)")
		return
	}
	id, ok := brokertest.Button(req, label)
	if !ok {
		s.count("user: " + what + " without a " + label + " button")
		return
	}
	s.gate.RLock()
	defer s.gate.RUnlock()
	in, err := s.w.Srv.TryClickButton(th.id, req.ID, th.starter.ID, id)
	if err != nil {
		// It closed (it timed out, or the turn ended) between reading it
		// and the click.
		s.count("user: " + what + " closed before the click")
		return
	}
	s.count("user: " + what + " clicked")
	if _, err := s.d.Response(wctx, in); err != nil {
		s.mu.Lock()
		s.interact = append(s.interact, fmt.Sprintf("thread %s: %s click: %v", th.id, what, err))
		s.mu.Unlock()
	}
}

// chooseModel has the thread's starter choose a model with /model, while
// a turn runs or after it; the agent's answer is the command's.
func (s *soak) chooseModel(ctx context.Context, th *thread, model string) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	s.count("user: /model")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in := s.w.Srv.SlashCommand(th.id, th.starter.ID, "model", map[string]any{"value": model})
	if _, err := s.d.Response(wctx, in); err != nil {
		s.mu.Lock()
		s.interact = append(s.interact, fmt.Sprintf("thread %s: /model: %v", th.id, err))
		s.mu.Unlock()
	}
}

// state reads what the thread shows about a prompt: its final status
// reactions (with the time of the first), and whether it still shows
// queued or working.
func (s *soak) state(p *prompt) (finals []string, at time.Time, busy, acked bool) {
	bot := s.w.Srv.Bot().ID
	for _, r := range s.w.Srv.Reactions(p.channel, p.id) {
		if r.UserID != bot {
			continue
		}
		acked = true
		switch {
		case brokertest.Final(r.Emoji):
			if len(finals) == 0 {
				at = r.At
			}
			finals = append(finals, r.Emoji)
		case r.Emoji == brokertest.Queued || r.Emoji == brokertest.Working:
			busy = true
		}
	}
	return finals, at, busy, acked
}

// describe says what the thread shows of a prompt: the bot's reactions
// on it, the thread's last bot message, and the kills around it.
func (s *soak) describe(p *prompt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "bot reactions now %v", s.d.BotReactions(p.channel, p.id))
	msgs := s.d.BotMessages(p.thread)
	if n := len(msgs); n > 0 {
		last := msgs[n-1].Content
		if i := strings.LastIndexByte(last, '\n'); i >= 0 {
			last = last[i+1:]
		}
		fmt.Fprintf(&b, ", last bot message ends %q", excerpt(last, 100))
	}
	s.mu.Lock()
	for _, k := range s.kills {
		if d := k.Sub(p.sent); d > -5*time.Second && d < 60*time.Second {
			fmt.Fprintf(&b, ", broker SIGKILLed %s after it was sent", d.Round(time.Millisecond))
		}
	}
	s.mu.Unlock()
	return b.String()
}

func excerpt(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// headAndTail shortens s to about n runes, keeping its last line (where
// an answer says how its turn ended).
func headAndTail(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	last := s[strings.LastIndexByte(s, '\n')+1:]
	return excerpt(s, n) + " … " + excerpt(last, 200)
}

// awaitOutcomes waits until every prompt of the thread has its outcome;
// a prompt without one after limit is a stuck thread.
func (s *soak) awaitOutcomes(ctx context.Context, th *thread, limit time.Duration) bool {
	return awaitResolved(ctx, limit, func() []*prompt { return s.resolve(th) }, func(p *prompt) {
		s.mu.Lock()
		p.stuck = true
		s.mu.Unlock()
		s.violate("thread %s stuck: prompt %s (%s, sent %s after the start) has no outcome after %s; %s",
			th.id, p.id, p.behaviour, p.sent.Sub(s.start).Round(time.Millisecond), limit, s.describe(p))
	})
}

// resolve records the outcomes now shown and returns the prompts still
// open (lost prompts count as closed).
func (s *soak) resolve(th *thread) []*prompt {
	s.mu.Lock()
	ps := append([]*prompt(nil), th.prompts...)
	s.mu.Unlock()
	// A thread's prompts are answered in order, one outcome message
	// each, so the first len(shown) prompts have theirs in the thread.
	shown := s.outcomeMessages(th.id)
	var open []*prompt
	i := 0
	for _, p := range ps {
		finals, at, busy, acked := s.state(p)
		s.mu.Lock()
		done, lost, stuck := p.outcome != "", p.lost, p.stuck
		s.mu.Unlock()
		if lost && !acked && len(finals) == 0 {
			continue // never reached a broker: no outcome due
		}
		var message *outcomeMessage
		if i < len(shown) {
			message = &shown[i]
		}
		i++
		if done || stuck {
			continue
		}
		switch {
		case len(finals) > 0 && !busy:
			if len(finals) > 1 {
				s.violate("prompt %s in thread %s (%s) has %d outcomes: %v", p.id, p.thread, p.behaviour, len(finals), finals)
			}
			s.mu.Lock()
			p.outcome, p.outcomeAt, p.acked = finals[0], at, true
			s.mu.Unlock()
		case message != nil && time.Since(message.at) > reactionGrace:
			// The thread shows the outcome; the status reaction never
			// followed.
			s.mu.Lock()
			p.outcome, p.outcomeAt = shownOnly, message.at
			s.mu.Unlock()
		default:
			open = append(open, p)
		}
	}
	return open
}

// shownOnly is the outcome of a prompt whose thread shows its outcome
// message but whose status reaction never became final.
const shownOnly = "shown"

// reactionGrace is how long after its outcome message a prompt's final
// status reaction may come (reactions of one channel are paced).
const reactionGrace = 30 * time.Second

// killer SIGKILLs the broker now and then and starts it again.
func (s *soak) killer(ctx context.Context, abort func()) {
	r := rand.New(rand.NewPCG(s.k.seed, 0xdead))
	for {
		wait := s.k.killEvery/2 + time.Duration(r.Int64N(int64(s.k.killEvery)))
		if time.Now().Add(wait).After(s.end.Add(-10 * time.Second)) {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !s.killAndRestart(ctx) {
			abort()
			return
		}
	}
}

func (s *soak) killAndRestart(ctx context.Context) bool {
	s.gate.Lock()
	defer s.gate.Unlock()
	// Wait for the broker to acknowledge what was sent: a message
	// Discord delivered to a broker that died before reading it is lost,
	// as it would be on Discord.
	deadline := time.Now().Add(20 * time.Second)
	for {
		unacked := s.unacked()
		slackWaits := s.slack != nil && len(s.slackUnacked()) > 0
		if len(unacked) == 0 && !slackWaits || time.Now().After(deadline) {
			s.mu.Lock()
			for _, p := range unacked {
				p.lost = true
			}
			s.mu.Unlock()
			if s.slack != nil {
				s.markSlackLost()
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	old := s.current()
	left := s.w.AgentPIDs()
	if m, err := old.Metrics(ctx); err == nil {
		s.mu.Lock()
		s.rateLimitd += m[`acp_broker_chat_rate_limited_total{platform="discord"}`]
		s.mu.Unlock()
	}
	at := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := s.w.Restart(sctx, old, true)
	took := time.Since(at)
	if err != nil {
		s.violate("the broker did not come back after SIGKILL: %v", err)
		s.aborted.Store(true)
		return false
	}
	s.mu.Lock()
	s.broker = b
	s.brokers = append(s.brokers, b)
	s.restarts = append(s.restarts, took)
	s.kills = append(s.kills, at)
	s.mu.Unlock()
	fmt.Printf("%s SIGKILL broker pid %d; pid %d ready after %s\n", time.Since(s.start).Round(time.Second), old.PID(), b.PID(), took.Round(time.Millisecond))
	// The agents the dead broker left are the new one's to kill.
	s.checks.Go(func() {
		for _, pid := range left {
			if !agenttest.WaitGone(pid, 15*time.Second) {
				s.violate("agent pid %d, left by the SIGKILLed broker pid %d, still runs 15s after broker pid %d was ready", pid, old.PID(), b.PID())
			}
		}
	})
	return true
}

func (s *soak) unacked() []*prompt {
	s.mu.Lock()
	ps := append([]*prompt(nil), s.prompts...)
	s.mu.Unlock()
	var out []*prompt
	for _, p := range ps {
		s.mu.Lock()
		acked := p.acked
		s.mu.Unlock()
		if acked {
			continue
		}
		if _, _, _, a := s.state(p); a {
			s.mu.Lock()
			p.acked = true
			s.mu.Unlock()
			continue
		}
		out = append(out, p)
	}
	return out
}

// gatewayFaults cuts the gateway connection or asks the broker to
// reconnect, now and then. Events meanwhile are replayed on RESUME.
func (s *soak) gatewayFaults(ctx context.Context) {
	r := rand.New(rand.NewPCG(s.k.seed, 0x9a7e))
	for {
		t := time.NewTimer(s.k.dropEvery/2 + time.Duration(r.Int64N(int64(s.k.dropEvery))))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if r.IntN(2) == 0 {
			s.w.Srv.DropGateway()
			s.count("fault: gateway connection cut")
		} else {
			s.w.Srv.RequestReconnect()
			s.count("fault: gateway RECONNECT")
		}
	}
}

// sample scrapes the broker every 2s for the peaks of goroutines and RSS.
func (s *soak) sample(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		b := s.current()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := b.Metrics(sctx)
		cancel()
		rss, rerr := b.RSS()
		s.mu.Lock()
		if err == nil {
			s.peakGor = max(s.peakGor, m["go_goroutines"])
		}
		if rerr == nil {
			s.peakRSS = max(s.peakRSS, rss)
		}
		s.mu.Unlock()
	}
}

func (s *soak) progress(ctx context.Context) {
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		sent, done := len(s.prompts), 0
		for _, p := range s.prompts {
			if p.outcome != "" {
				done++
			}
		}
		nv := len(s.violations)
		s.mu.Unlock()
		fmt.Printf("%s prompts %d, with outcome %d, violations %d\n", time.Since(s.start).Round(time.Second), sent, done, nv)
	}
}

// probe sends every thread a last prompt, which must be answered.
func (s *soak) probe(ctx context.Context) {
	var wg sync.WaitGroup
	s.mu.Lock()
	threads := append([]*thread(nil), s.threads...)
	s.mu.Unlock()
	for _, th := range threads {
		wg.Go(func() {
			if !s.awaitOutcomes(ctx, th, 150*time.Second) {
				return
			}
			s.mu.Lock()
			stuck := false
			for _, p := range th.prompts {
				stuck = stuck || p.stuck
			}
			s.mu.Unlock()
			if stuck {
				s.count("end: threads not probed (stuck)")
				return
			}
			p, ok := s.send(ctx, th, "final probe", "stream 2 10ms", false)
			if !ok || !s.awaitOutcomes(ctx, th, 90*time.Second) {
				return
			}
			s.mu.Lock()
			outcome := p.outcome
			s.mu.Unlock()
			if outcome != brokertest.Done {
				s.violate("thread %s: the final probe %s ended %s, want %s", th.id, p.id, outcome, brokertest.Done)
			}
		})
	}
	wg.Wait()
}

// killedAfter says if the broker was SIGKILLed within 30s after t.
func (s *soak) killedAfter(t time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.kills {
		if d := k.Sub(t); d >= 0 && d < 30*time.Second {
			return fmt.Sprintf(" (the broker was SIGKILLed %s after that outcome message)", d.Round(time.Millisecond))
		}
	}
	return ""
}

// checkOutcomes checks, once everything is quiet, that each thread
// shows one outcome message (a footer, a refusal or a restart notice)
// per prompt, and that every prompt's status reaction is final: exactly
// one of ✅ ❌ ⏹️, and no ⏳ or ⚙️ left.
func (s *soak) checkOutcomes() {
	s.mu.Lock()
	threads := append([]*thread(nil), s.threads...)
	s.mu.Unlock()
	for _, th := range threads {
		s.mu.Lock()
		ps := append([]*prompt(nil), th.prompts...)
		s.mu.Unlock()
		shown := s.outcomeMessages(th.id)
		due := 0
		for _, p := range ps {
			finals, _, busy, acked := s.state(p)
			s.mu.Lock()
			lost := p.lost
			s.mu.Unlock()
			if lost && !acked && len(finals) == 0 {
				continue // never reached a broker
			}
			due++
			if len(finals) > 0 {
				s.mu.Lock()
				if p.outcome == shownOnly || p.outcome == "" {
					p.outcome = finals[0] // came late
				}
				s.mu.Unlock()
			}
			switch {
			case len(finals) == 0 && due <= len(shown):
				s.violate("prompt %s in thread %s (%s): the thread shows an outcome for it, but its status reaction is %v, not final%s",
					p.id, th.id, p.behaviour, s.d.BotReactions(p.channel, p.id), s.killedAfter(shown[due-1].at))
			case len(finals) > 1:
				s.violate("prompt %s in thread %s (%s) has %d outcomes: %v", p.id, th.id, p.behaviour, len(finals), finals)
			case busy && len(finals) > 0:
				s.violate("prompt %s in thread %s (%s) still shows queued or working beside %v", p.id, th.id, p.behaviour, finals)
			}
		}
		if len(shown) != due {
			s.violate("thread %s shows %d outcome messages for %d prompts", th.id, len(shown), due)
		}
	}
}

// outcomeMessage is a bot message that ends a prompt: its outcome line
// and when it was last changed.
type outcomeMessage struct {
	text string
	at   time.Time
}

// outcomeMessages are the bot's messages in a thread that end a prompt:
// final footers (also on the note under a waiting message that never
// ran), refusals and restart notices.
func (s *soak) outcomeMessages(thread string) []outcomeMessage {
	var out []outcomeMessage
	bot := s.d.Srv.Bot().ID
	for _, m := range s.d.Srv.Messages(thread) {
		if m.Author.ID != bot || m.InteractionID != "" || strings.HasPrefix(m.Content, brokertest.PermissionPrefix) {
			continue
		}
		at := m.Created
		if !m.EditedAt.IsZero() {
			at = m.EditedAt
		}
		if m.ReferenceID != "" {
			// The note under a waiting message: it shows that message's
			// outcome when the message never ran (removed, or cancelled
			// with the queue by a reset).
			if f := brokertest.Footer(m.Content); f != "" {
				out = append(out, outcomeMessage{f, at})
			}
			continue
		}
		if f := brokertest.Footer(m.Content); f != "" {
			out = append(out, outcomeMessage{f, at})
		} else if strings.HasPrefix(m.Content, "⚠️") {
			first, _, _ := strings.Cut(m.Content, "\n")
			out = append(out, outcomeMessage{first, at})
		}
	}
	return out
}

// checkQuiet waits for the broker's pending work to drain and its
// goroutines and memory to come back near where they started.
func (s *soak) checkQuiet(ctx context.Context, b *brokertest.Broker, baseGor float64, baseRSS int64) {
	zero := []string{"acp_broker_turns_running", "acp_broker_prompts_waiting", "acp_broker_acp_pending_requests",
		"acp_broker_acp_pending_permission_requests", `acp_broker_chat_open_permission_requests{platform="discord"}`, "acp_broker_agents_busy",
		"acp_broker_agents_starting", "acp_broker_acp_pending_elicitations", `acp_broker_chat_open_questions{platform="discord"}`,
		"acp_broker_acp_agent_requests_in_flight", "acp_broker_terminals_open", "acp_broker_store_active_turns",
		`acp_broker_chat_open_permission_requests{platform="slack"}`, `acp_broker_chat_open_questions{platform="slack"}`}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	m, err := b.AwaitMetrics(wctx, 500*time.Millisecond, func(m brokertest.Metrics) bool {
		for _, name := range zero {
			if m.Sum(name) != 0 {
				return false
			}
		}
		return true
	})
	cancel()
	if err != nil {
		var bad []string
		for _, name := range zero {
			if v := m.Sum(name); v != 0 {
				bad = append(bad, fmt.Sprintf("%s=%g", name, v))
			}
		}
		s.violate("pending work did not return to zero within 60s: %s", strings.Join(bad, ", "))
	}
	// Idle agents stop after pool.idle_timeout; then the broker is at rest.
	wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	m, err = b.AwaitMetrics(wctx, 500*time.Millisecond, func(m brokertest.Metrics) bool {
		return m["acp_broker_agents_live"] == 0 && m["go_goroutines"] <= goroutineBound(baseGor)
	})
	cancel()
	if err != nil {
		s.violate("60s after the load: %g agents live, %g goroutines (at rest at the start: %g, bound %g)",
			m["acp_broker_agents_live"], m["go_goroutines"], baseGor, goroutineBound(baseGor))
	}
	s.mu.Lock()
	s.events["end: goroutines"] = int(m["go_goroutines"])
	s.mu.Unlock()
	settle()
	rss, err := b.RSS()
	if err != nil {
		s.violate("RSS: %v", err)
	}
	s.mu.Lock()
	s.events["end: RSS bytes"] = int(rss)
	s.events["start: goroutines"] = int(baseGor)
	s.events["start: RSS bytes"] = int(baseRSS)
	s.mu.Unlock()
	if rss > rssBound(baseRSS) {
		s.violate("RSS %s at the end, %s at rest at the start (bound %s)", mib(rss), mib(baseRSS), mib(rssBound(baseRSS)))
	}
}

func goroutineBound(base float64) float64 { return base*1.25 + 10 }
func rssBound(base int64) int64           { return base + 32<<20 }

// settle gives the broker's runtime a moment to return freed memory:
// the Go scavenger gives back idle heap within seconds.
func settle() { time.Sleep(5 * time.Second) }

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// footerKind is a footer without its figures, e.g. "❌ agent exited (status #)".
func footerKind(f string) string {
	f = strings.TrimPrefix(f, "-# ")
	f, _, _ = strings.Cut(f, " · ")
	return digits.ReplaceAllString(f, "#")
}

func (s *soak) summary(stopTook time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("\n==== chaos soak summary ====")
	p("duration %s (load), %d threads, seed %d", s.k.duration, len(s.threads), s.k.seed)
	noticed := map[string]bool{} // prompts a restart notice names
	for _, th := range s.threads {
		for _, m := range s.d.BotMessages(th.id) {
			if strings.HasPrefix(m.Content, brokertest.RestartNotice) {
				if i := strings.LastIndexByte(m.Content, '/'); i >= 0 {
					noticed[strings.TrimSpace(m.Content[i+1:])] = true
				}
			}
		}
	}
	kinds := map[string]int{}
	byBehaviour := map[string]map[string]int{}
	lost := 0
	var slowest *prompt
	for _, pr := range s.prompts {
		o := pr.outcome
		switch {
		case o == "" && pr.lost:
			o, lost = "lost with a killed broker", lost+1
		case o == "":
			o = "none"
		case noticed[pr.id]:
			o = "⚠️ restart notice"
		default:
			o = outcomeWords(o)
		}
		tally(kinds, byBehaviour, pr.behaviour, o)
		if pr.outcome != "" && (slowest == nil || pr.outcomeAt.Sub(pr.sent) > slowest.outcomeAt.Sub(slowest.sent)) {
			slowest = pr
		}
	}
	p("prompts: %d; outcomes: %s", len(s.prompts), render(kinds))
	for _, name := range sortedKeys(byBehaviour) {
		p("  %-22s %s", name, render(byBehaviour[name]))
	}
	footers := map[string]int{}
	notices := 0
	for _, th := range s.threads {
		for _, m := range s.outcomeMessages(th.id) {
			if strings.HasPrefix(m.text, brokertest.RestartNotice) {
				notices++
				continue
			}
			footers[footerKind(m.text)]++
		}
	}
	p("outcome messages: %d restart notices; footers:", notices)
	for _, k := range sortedKeys(footers) {
		p("  %5d  %s", footers[k], k)
	}
	s.slackSummary(p)
	chaos := s.w.Srv.ChaosCounts()
	p("faults: broker SIGKILLed %d times, random 429s %d, random 5xx %v, 429s the broker counted %.0f",
		len(s.kills), chaos.TooManyRequests, chaos.Errors, s.rateLimitd)
	var ev []string
	for _, k := range sortedKeys(s.events) {
		if strings.HasPrefix(k, "fault:") || strings.HasPrefix(k, "user:") || strings.HasPrefix(k, "slack user:") {
			ev = append(ev, fmt.Sprintf("%s %d", k, s.events[k]))
		}
	}
	p("events: %s", strings.Join(ev, ", "))
	if slowest != nil {
		p("slowest outcome: %s for prompt %s (%s) in thread %s", slowest.outcomeAt.Sub(slowest.sent).Round(time.Millisecond), slowest.id, slowest.behaviour, slowest.thread)
	}
	rec, recThread := s.slowestRecovery()
	p("slowest recovery (a quick prompt right after a failed, cancelled or interrupted one, sent to outcome): %s in thread %s", rec.Round(time.Millisecond), recThread)
	var worst time.Duration
	for _, d := range s.restarts {
		worst = max(worst, d)
	}
	p("restarts: %d, slowest SIGKILL-to-ready %s", len(s.restarts), worst.Round(time.Millisecond))
	p("goroutines: %d at rest at the start, %.0f peak, %d at the end (bound %.0f)", s.events["start: goroutines"], s.peakGor,
		s.events["end: goroutines"], goroutineBound(float64(s.events["start: goroutines"])))
	p("RSS: %s at rest at the start, %s peak, %s at the end", mib(int64(s.events["start: RSS bytes"])), mib(s.peakRSS), mib(int64(s.events["end: RSS bytes"])))
	p("shutdown (SIGTERM) took %s", stopTook.Round(time.Millisecond))
	if len(s.interact) > 0 {
		p("interactions answered late or refused: %d", len(s.interact))
		for _, in := range s.interact[:min(len(s.interact), 10)] {
			p("  %s", in)
		}
	}
	if len(s.violations) == 0 {
		p("invariants: all held")
	} else {
		p("invariants: %d broken", len(s.violations))
		for i, v := range s.violations {
			if i == 40 {
				p("  … %d more", len(s.violations)-40)
				break
			}
			p("  - %s", v)
		}
	}
	fmt.Print(b.String())
}

// quick are the behaviours that answer at once: after a failure their
// time to an answer is the time the thread takes to recover.
var quick = map[string]bool{"answer": true, "demo": true, "print junk": true, "final probe": true}

// slowestRecovery is, over all threads, the longest time from sending a
// quick prompt right after one that failed, was cancelled or was
// interrupted, to that prompt's outcome: the thread's agent is started
// again, its session resumed, and a queue or slot waited for.
func (s *soak) slowestRecovery() (time.Duration, string) {
	var worst time.Duration
	var where string
	for _, th := range s.threads {
		failed := false
		for _, p := range th.prompts {
			if p.outcome == "" {
				continue
			}
			if failed && quick[p.behaviour] {
				if d := p.outcomeAt.Sub(p.sent); d > worst {
					worst, where = d, th.id+" (prompt "+p.id+")"
				}
			}
			failed = p.outcome != brokertest.Done
		}
	}
	return worst, where
}

// outcomeWords are the summary's words for a prompt's outcome.
func outcomeWords(o string) string {
	switch o {
	case shownOnly:
		return "outcome shown, status reaction lost"
	case brokertest.Done:
		return "✅ answer"
	case brokertest.Failed:
		return "❌ failure"
	case brokertest.Cancelled:
		return "⏹️ cancelled"
	}
	return o
}

// tally counts a prompt's outcome o in kinds, and by its behaviour.
func tally(kinds map[string]int, byBehaviour map[string]map[string]int, behaviour, o string) {
	kinds[o]++
	if byBehaviour[behaviour] == nil {
		byBehaviour[behaviour] = map[string]int{}
	}
	byBehaviour[behaviour][o]++
}

func render(m map[string]int) string {
	var out []string
	for _, k := range sortedKeys(m) {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// keepLogs copies the brokers' logs where they survive the test's
// temporary directory.
func (s *soak) keepLogs() {
	dir := s.k.logDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", fmt.Sprintf("soak-%d-", s.k.seed)); err != nil {
			return
		}
	}
	os.MkdirAll(dir, 0o755)
	s.mu.Lock()
	brokers := append([]*brokertest.Broker(nil), s.brokers...)
	s.mu.Unlock()
	for i, b := range brokers {
		data, err := os.ReadFile(b.Log.Path())
		if err == nil {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("broker-%d-pid%d.log", i+1, b.PID())), data, 0o644)
		}
	}
	s.mu.Lock()
	var bad []*thread
	for _, th := range s.threads {
		if s.bad[th.id] {
			bad = append(bad, th)
		}
	}
	s.mu.Unlock()
	for _, th := range bad {
		os.WriteFile(filepath.Join(dir, "thread-"+th.id+".txt"), []byte(s.transcript(th)), 0o644)
	}
	fmt.Printf("broker logs, and transcripts of the threads named above: %s\n", dir)
}

// transcript is a thread as the fake Discord saw it, in time order:
// every message with its final content, and every reaction call the bot
// made on the thread's prompts, with times from the soak's start.
func (s *soak) transcript(th *thread) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	add := func(at time.Time, format string, args ...any) {
		lines = append(lines, line{at, fmt.Sprintf(format, args...)})
	}
	s.mu.Lock()
	prompts := append([]*prompt(nil), th.prompts...)
	s.mu.Unlock()
	ids := map[string]*prompt{}
	for _, p := range prompts {
		ids[p.id] = p
		add(p.sent, "%s prompt %s (%s), outcome %q", th.starter.Username, p.id, p.behaviour, p.outcome)
	}
	for _, m := range s.w.Srv.Messages(th.id) {
		if m.Author.ID != s.w.Srv.Bot().ID {
			continue
		}
		add(m.Created, "bot message %s (edits %d, last %s): %q", m.ID, m.Edits, rel(s.start, m.EditedAt), headAndTail(m.Content, 300))
	}
	for _, r := range s.w.Srv.Requests() {
		if !strings.Contains(r.Path, "/reactions/") {
			continue
		}
		parts := strings.Split(r.Path, "/") // /channels/C/messages/M/reactions/E/@me
		if len(parts) < 7 || ids[parts[4]] == nil {
			continue
		}
		add(r.At, "bot %s reaction %s on %s: %d", r.Method, parts[6], parts[4], r.Status)
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	var b strings.Builder
	fmt.Fprintf(&b, "thread %s, started by %s; times from the soak's start; kills at", th.id, th.starter.Username)
	s.mu.Lock()
	for _, k := range s.kills {
		fmt.Fprintf(&b, " %s", rel(s.start, k))
	}
	s.mu.Unlock()
	b.WriteString("\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "%10s  %s\n", rel(s.start, l.at), l.text)
	}
	return b.String()
}

func rel(start, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(start).Round(time.Millisecond).String()
}
