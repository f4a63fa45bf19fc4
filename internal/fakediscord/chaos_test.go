package fakediscord_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"

	"github.com/bwmarrin/discordgo"
)

// postMessages posts n messages to the channel with a plain HTTP client
// (no retries) and returns the statuses answered.
func postMessages(t *testing.T, srv *fakediscord.Server, n int) []int {
	t.Helper()
	hc := srv.HTTPClient()
	var out []int
	for i := range n {
		req, _ := http.NewRequest("POST", srv.APIURL()+"channels/"+channelID+"/messages", strings.NewReader(fmt.Sprintf(`{"content":"m%d"}`, i)))
		req.Header.Set("Authorization", "Bot "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		out = append(out, resp.StatusCode)
	}
	return out
}

// Chaos fails about the share of requests it is told to, with the
// statuses it is told to, counts what it injected, draws the same
// sequence again from the same seed, and stops when cleared.
func TestChaosFailsTheGivenShareOfRequests(t *testing.T) {
	t.Parallel()
	run := func() ([]int, fakediscord.ChaosCounts) {
		srv := newServer(t, fakediscord.Options{NoRateLimits: true})
		srv.SetChaos(fakediscord.Chaos{Seed: 7, Rate429: 0.2, RateError: 0.2, RetryAfter: 50 * time.Millisecond,
			ErrorStatuses: []int{502, 500}})
		got := postMessages(t, srv, 400)
		counts := srv.ChaosCounts()
		srv.SetChaos(fakediscord.Chaos{})
		for _, code := range postMessages(t, srv, 20) {
			if code != 200 {
				t.Errorf("after the chaos was cleared a request got %d", code)
			}
		}
		if after := srv.ChaosCounts(); after.TooManyRequests != counts.TooManyRequests {
			t.Errorf("counts changed after the chaos stopped: %+v then %+v", counts, after)
		}
		return got, counts
	}
	got, counts := run()
	by := map[int]int{}
	for _, c := range got {
		by[c]++
	}
	// 400 draws at 20%: 80 expected; 50..110 is over 3.5 sigma each way.
	for _, c := range []int{429, 502, 500} {
		want := 80
		if c != 429 {
			want = 40
		}
		if by[c] < want*5/8 || by[c] > want*11/8 {
			t.Errorf("%d requests answered %d, want about %d (all: %v)", by[c], c, want, by)
		}
	}
	if counts.TooManyRequests != by[429] || counts.Errors[502] != by[502] || counts.Errors[500] != by[500] {
		t.Errorf("counts %+v do not match the answers %v", counts, by)
	}
	if again, _ := run(); !slices.Equal(got, again) {
		t.Errorf("the same seed drew a different sequence")
	}
}

// Chaos limited by Match leaves other requests alone.
func TestChaosOnlyHitsMatchingRequests(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{NoRateLimits: true})
	srv.SetChaos(fakediscord.Chaos{Rate429: 1, Match: fakediscord.OnRoute(fakediscord.RouteEditMessage)})
	for _, code := range postMessages(t, srv, 10) {
		if code != 200 {
			t.Fatalf("a request outside Match got %d", code)
		}
	}
	if n := srv.ChaosCounts().TooManyRequests; n != 0 {
		t.Errorf("%d 429s counted", n)
	}
}

// A dropped request gets no answer at all: the client sees the
// connection fail, by script (InjectDrop) or by Chaos (RateDrop), and the
// request is recorded as injected.
func TestDropCutsTheConnection(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{NoRateLimits: true})
	post := func() error {
		req, _ := http.NewRequest("POST", srv.APIURL()+"channels/"+channelID+"/messages", strings.NewReader(`{"content":"m"}`))
		req.Header.Set("Authorization", "Bot "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.HTTPClient().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	srv.InjectDrop(fakediscord.OnRoute(fakediscord.RouteCreateMessage), 1)
	if err := post(); err == nil {
		t.Fatal("a dropped request was answered")
	}
	if err := post(); err != nil {
		t.Fatalf("the request after the one dropped: %v", err)
	}
	srv.SetChaos(fakediscord.Chaos{RateDrop: 1})
	if err := post(); err == nil {
		t.Fatal("a request Chaos drops was answered")
	}
	srv.SetChaos(fakediscord.Chaos{})
	if n := srv.ChaosCounts().Drops; n != 1 {
		t.Errorf("Chaos counted %d drops, want 1", n)
	}
	var injected int
	for _, r := range srv.RequestsTo(fakediscord.RouteCreateMessage) {
		if r.Injected {
			injected++
		}
	}
	if injected != 2 {
		t.Errorf("%d requests recorded as injected, want 2", injected)
	}
}

// With MaxRequests the request record stays bounded and keeps the
// latest requests.
func TestMaxRequestsBoundsTheRecord(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{NoRateLimits: true, MaxRequests: 10})
	postMessages(t, srv, 55)
	reqs := srv.Requests()
	if len(reqs) < 10 || len(reqs) > 20 {
		t.Fatalf("%d requests remembered, want 10 to 20", len(reqs))
	}
	msgs := srv.Messages(channelID)
	if len(msgs) != 55 {
		t.Fatalf("%d messages, want 55", len(msgs))
	}
	if last := reqs[len(reqs)-1]; !strings.Contains(string(last.Body), `"m54"`) {
		t.Errorf("the last request remembered is %s, want the 55th", last.Body)
	}
}

// With MaxBacklog a session keeps only its latest dispatches: a client
// that missed more than that is refused its RESUME and identifies anew,
// while one that missed less is resumed with the events replayed.
func TestMaxBacklogRefusesAResumeThatNeedsMore(t *testing.T) {
	t.Parallel()
	srv := newServer(t, fakediscord.Options{MaxBacklog: 2})
	var ready <-chan *discordgo.Ready
	var created <-chan *discordgo.MessageCreate
	openBot(t, srv, allIntents, func(s *discordgo.Session) {
		ready = events[*discordgo.Ready](s)
		created = events[*discordgo.MessageCreate](s)
	})
	recv(t, ready, nil)

	beats := srv.Stats().Heartbeats
	srv.DropGateway()
	srv.Await("the connection to drop", func() bool { return !srv.Connected() })
	away := srv.SendMessage(channelID, alice, "one missed")
	srv.Await("a resume", func() bool { st := srv.Stats(); return st.Resumes == 1 && st.Connected })
	if m := recv(t, created, nil); m.ID != away {
		t.Errorf("replayed %s, want %s", m.ID, away)
	}
	// As after Open (see openBot): a drop before the resumed connection's
	// first heartbeat makes discordgo reconnect twice at once, and on a
	// busy machine the second drop came that early.
	srv.Await("the resumed connection's first heartbeat", func() bool { return srv.Stats().Heartbeats > beats })

	srv.DropGateway()
	srv.Await("the connection to drop", func() bool { return !srv.Connected() })
	for i := range 6 {
		srv.SendMessage(channelID, alice, fmt.Sprintf("missed %d", i))
	}
	recv(t, ready, nil) // identified anew
	st := srv.Stats()
	if st.ResumesRejected != 1 || st.Identifies != 2 || st.Resumes != 1 {
		t.Errorf("stats = %+v", st)
	}
	id := srv.SendMessage(channelID, alice, "after")
	for {
		m := recv(t, created, nil)
		if m.ID == id {
			break
		}
		if strings.HasPrefix(m.Content, "missed") {
			t.Errorf("a message the refused session missed was delivered: %q", m.Content)
		}
	}
}
