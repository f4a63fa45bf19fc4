package broker_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"
)

// webUser is a browser of one person on the broker's web front end.
type webUser struct {
	t *testing.T
	c *http.Client
}

func newWebUser(t *testing.T) *webUser {
	jar, _ := cookiejar.New(nil)
	return &webUser{t: t, c: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (u *webUser) do(req *http.Request) (*http.Response, string) {
	u.t.Helper()
	resp, err := u.c.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (u *webUser) get(link string) (*http.Response, string) {
	req, _ := http.NewRequest("GET", link, nil)
	return u.do(req)
}

func (u *webUser) post(link string, form url.Values) (*http.Response, string) {
	req, _ := http.NewRequest("POST", link, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return u.do(req)
}

var (
	signInLink = regexp.MustCompile(`http://[^\s>)]+/signin\?t=[A-Za-z0-9_-]+`)
	formToken  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
)

// webSignIn has who ask /web in where and follows the link it is given
// privately; it returns the page signing in led to.
func webSignIn(ctx context.Context, t *testing.T, w *brokertest.World, where string, who fakediscord.User) (*webUser, string, string) {
	t.Helper()
	r, err := w.Discord.Slash(ctx, where, who, "web")
	if err != nil {
		t.Fatal(err)
	}
	if r.Flags&64 == 0 {
		t.Fatalf("/web answered for everyone to see (flags %d): %q", r.Flags, r.Content)
	}
	link := signInLink.FindString(r.Content)
	if link == "" {
		t.Fatalf("/web gave no link: %q", r.Content)
	}
	u := newWebUser(t)
	if resp, body := u.get(link); resp.StatusCode != 200 || !strings.Contains(body, `id="signin-form"`) {
		t.Fatalf("the link's page: %d\n%s", resp.StatusCode, body)
	}
	base, _, _ := strings.Cut(link, "/signin")
	resp, _ := u.post(base+"/signin", url.Values{"t": {strings.TrimPrefix(link, base+"/signin?t=")}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing in: %d", resp.StatusCode)
	}
	if again, _ := newWebUser(t).post(base+"/signin", url.Values{"t": {strings.TrimPrefix(link, base+"/signin?t=")}}); again.StatusCode != http.StatusForbidden {
		t.Fatalf("the link signed in a second time: %d", again.StatusCode)
	}
	return u, base, resp.Header.Get("Location")
}

// Through the whole broker and the fake Discord: /web in a thread gives
// its asker alone a link that signs them in once and leads to the
// thread's page, which shows the agent's whole answer, longer than a
// Discord message; the list shows the thread.
func TestWeb_SlashWebSignsInAndTheThreadPageShowsTheWholeAnswer(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	b := open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "stream 400 1ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	first := w.Discord.BotMessages(thread)
	if len(first) == 0 || !hasLink(first[0], "Open in browser", b.WebURL()+"/t/discord/"+thread) {
		t.Errorf("the thread's first message carries no Open in browser link to its page: %+v", first)
	}

	alice, base, landed := webSignIn(ctx, t, w, thread, brokertest.Alice)
	if landed != "/t/discord/"+thread {
		t.Fatalf("signing in from the thread led to %q", landed)
	}
	resp, page := alice.get(base + landed)
	if resp.StatusCode != 200 {
		t.Fatalf("the thread's page: %d\n%s", resp.StatusCode, page)
	}
	answer := ""
	for i := 1; i <= 400; i++ {
		answer += "chunk " + strconv.Itoa(i) + "\n"
	}
	// The answer is Markdown: one paragraph, its last line break dropped.
	if len(answer) <= 2000 || !strings.Contains(page, strings.TrimSuffix(answer, "\n")+"</p>") {
		t.Fatalf("the page does not show the whole answer (%d characters):\n%s", len(answer), page)
	}
	if !strings.Contains(page, `id="cancel-form"`) && !strings.Contains(page, `id="send-form"`) {
		t.Errorf("the starter's page has no controls")
	}
	resp, list := alice.get(base + "/threads")
	if resp.StatusCode != 200 || !strings.Contains(list, `data-thread="`+thread+`"`) || !strings.Contains(list, "stream 400 1ms") {
		t.Fatalf("the list: %d\n%s", resp.StatusCode, list)
	}
	if _, mine := alice.get(base + "/threads?filter=mine"); !strings.Contains(mine, `data-thread="`+thread+`"`) {
		t.Errorf("alice's thread is not among hers:\n%s", mine)
	}
	bob, _, landed := webSignIn(ctx, t, w, w.Channel, brokertest.Bob)
	if landed != "/threads" {
		t.Errorf("signing in from the channel led to %q", landed)
	}
	if _, mine := bob.get(base + "/threads?filter=mine"); strings.Contains(mine, `data-thread="`+thread+`"`) {
		t.Errorf("alice's thread is among bob's:\n%s", mine)
	}
}

// A permission request shows on the thread's page to who may act on the
// thread; answered there, it reaches the agent and the chat's request
// says who chose what. Someone who may not act sees no controls, and
// their forged answer and cancel are refused.
func TestWeb_APermissionAnsweredOnThePageReachesTheAgentAndTheChat(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "permission")
	if err != nil {
		t.Fatal(err)
	}
	req, err := w.Discord.PermissionRequest(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	bob, base, _ := webSignIn(ctx, t, w, thread, brokertest.Bob)
	_, bobPage := bob.get(base + "/t/discord/" + thread)
	if strings.Contains(bobPage, `class="ask"`) || strings.Contains(bobPage, `id="cancel-form"`) {
		t.Fatalf("bob, who may not act on alice's thread, is shown its controls:\n%s", bobPage)
	}
	alice, _, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	_, page := alice.get(base + "/t/discord/" + thread)
	ask := regexp.MustCompile(`name="ask" value="([^"]+)"`).FindStringSubmatch(page)
	option := regexp.MustCompile(`name="option" value="([^"]+)"`).FindStringSubmatch(page)
	if ask == nil || option == nil {
		t.Fatalf("alice's page shows no permission request:\n%s", page)
	}
	if _, list := alice.get(base + "/threads?filter=waiting"); !strings.Contains(list, `data-thread="`+thread+`" data-platform="discord" data-state="waiting for permission"`) {
		t.Errorf("the thread is not waiting for alice:\n%s", list)
	}
	if _, list := bob.get(base + "/threads?filter=waiting"); strings.Contains(list, `data-thread="`+thread+`"`) {
		t.Errorf("alice's thread waits for bob, who may not answer it:\n%s", list)
	}
	bobToken := formToken.FindStringSubmatch(bobPage)
	if resp, _ := bob.post(base+"/t/discord/"+thread+"/permit", url.Values{"csrf": {bobToken[1]}, "ask": {ask[1]}, "option": {option[1]}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's forged answer: %d, want 403", resp.StatusCode)
	}
	if resp, _ := bob.post(base+"/t/discord/"+thread+"/cancel", url.Values{"csrf": {bobToken[1]}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bob's forged cancel: %d, want 403", resp.StatusCode)
	}
	token := formToken.FindStringSubmatch(page)
	if resp, body := alice.post(base+"/t/discord/"+thread+"/permit", url.Values{"csrf": {token[1]}, "ask": {ask[1]}, "option": {option[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's answer: %d %s", resp.StatusCode, body)
	}
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
	if err != nil || !strings.Contains(answers[0].Text, option[1]) {
		t.Fatalf("the agent's answer after the page's choice %q: %+v, %v", option[1], answers, err)
	}
	if err := w.Srv.WaitFor(ctx, func() bool {
		for _, m := range w.Srv.Messages(thread) {
			if m.ID == req.ID {
				return len(m.Buttons()) == 0 && strings.Contains(m.Content, "on the web")
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the chat's request does not say it was answered on the web: %v", err)
	}
}

func hasLink(m fakediscord.Message, label, url string) bool {
	for _, b := range m.Buttons() {
		if b.Label == label && b.URL == url {
			return true
		}
	}
	return false
}

// On Slack, "@app web" in a thread and "/acp web" show the link to
// their user alone, and "@app web" leads to the thread's page.
func TestWeb_SlackAnswersWebPrivately(t *testing.T) {
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: broker.FakeAgent()}, brokertest.Options{
		Slack: &fakeslack.Options{},
		Conf:  brokertest.Settings{"log.level": "warn", "agent.sandbox": "none", "chat.platform": "slack", "web.listen": "127.0.0.1:0"},
	})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := w.Slack
	thread, err := s.Mention(ctx, s.Alice, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	before := len(s.BotMessages(thread))
	s.Command(thread, s.Alice, "web")
	e, err := s.Whispered(ctx, s.Alice, "/signin?t=", 0)
	if err != nil {
		t.Fatal(err)
	}
	link := signInLink.FindString(brokertest.SlackText(e.Blocks, e.Text))
	if link == "" {
		t.Fatalf("no link in %q", brokertest.SlackText(e.Blocks, e.Text))
	}
	if n := len(s.BotMessages(thread)); n != before {
		t.Fatalf("the thread shows %d more messages of the app's after web", n-before)
	}
	u := newWebUser(t)
	base, tok, _ := strings.Cut(link, "/signin?t=")
	resp, _ := u.post(base+"/signin", url.Values{"t": {tok}})
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/t/slack/") {
		t.Fatalf("signing in from Slack: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, page := u.get(base + resp.Header.Get("Location")); resp.StatusCode != 200 || !strings.Contains(page, "You said: hello") {
		t.Fatalf("the Slack thread's page: %d\n%s", resp.StatusCode, page)
	}
	s.Srv.SlashCommand(s.Channel, s.Bob.ID, "/acp", "web")
	if _, err := s.Whispered(ctx, s.Bob, "/signin?t=", 0); err != nil {
		t.Fatal(err)
	}
	if es := s.Srv.Ephemerals(s.Alice.ID); len(es) != 1 {
		t.Fatalf("alice was shown %d private messages, want her one link", len(es))
	}
}

// web.public_url names the links /web gives, web.session_ttl the
// sign-in's life, and an API token with web_admin signs in to the
// operator's view, which shows the broker's status; the web front end's
// gauges are on /metrics.
func TestWeb_PublicURLSessionTTLAndTheOperatorsView(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0", "web.public_url": "https://broker.example.com/", "web.session_ttl": "30m"})
	w.Raw = "[[api.tokens]]\nname = \"ops\"\ntoken = \"ops-token-0123456789abcdef\"\nchannels = [\"*\"]\nweb_admin = true\n"
	b := open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := w.Discord.Slash(ctx, w.Channel, brokertest.Alice, "web")
	if err != nil {
		t.Fatal(err)
	}
	_, tok, ok := strings.Cut(r.Content, "https://broker.example.com/signin?t=")
	if !ok {
		t.Fatalf("/web's link is not on web.public_url: %q", r.Content)
	}
	tok = strings.TrimRight(strings.Fields(tok)[0], ">)")
	base := "http://" + b.WebAddr()
	u := newWebUser(t)
	resp, _ := u.post(base+"/signin", url.Values{"t": {tok}})
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "acp_session" {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil || session.MaxAge != 1800 || !session.Secure {
		t.Fatalf("signing in: %d, cookie %+v: want one lasting web.session_ttl, Secure behind https", resp.StatusCode, session)
	}

	ops := newWebUser(t)
	if resp, _ := ops.post(base+"/admin/signin", url.Values{"token": {"ops-token-0123456789abcdef"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator's sign-in: %d", resp.StatusCode)
	}
	// Secure cookies are not sent over plain HTTP: the jar holds it, the
	// test sends it.
	req, _ := http.NewRequest("GET", base+"/admin", nil)
	for _, c := range ops.c.Jar.Cookies(mustURL(t, "https://"+b.WebAddr())) {
		req.AddCookie(c)
	}
	resp, page := ops.do(req)
	if resp.StatusCode != 200 || !strings.Contains(page, "discord: connected") || !strings.Contains(page, "agents live") {
		t.Fatalf("the operator's view: %d\n%s", resp.StatusCode, page)
	}
	_, m := get(t, b, "/metrics")
	if got := brokertest.ParseMetrics(m)["acp_broker_web_sessions"]; got != 2 {
		t.Fatalf("acp_broker_web_sessions = %v, want 2:\n%s", got, brokertest.ParseMetrics(m).Grep("acp_broker_web"))
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Cancel on the page stops the running turn, and a message written there
// runs in the thread as a prompt.
func TestWeb_CancelAndSendFromThePage(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "hang")
	if err != nil {
		t.Fatal(err)
	}
	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	path := base + "/t/discord/" + thread
	var page string
	if err := w.Srv.WaitFor(ctx, func() bool {
		_, page = alice.get(path)
		return strings.Contains(page, `id="cancel-form"`)
	}); err != nil {
		t.Fatalf("no Cancel on the running turn's page: %v\n%s", err, page)
	}
	token := formToken.FindStringSubmatch(page)[1]
	if resp, body := alice.post(path+"/cancel", url.Values{"csrf": {token}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
	if err != nil || !strings.Contains(answers[0].Text, "on the web") {
		t.Fatalf("the cancelled turn's end does not say it was cancelled on the web: %+v, %v", answers, err)
	}
	if resp, body := alice.post(path+"/send", url.Values{"csrf": {token}, "text": {"stream 3 1ms"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("send: %d %s", resp.StatusCode, body)
	}
	answers, err = w.Discord.AwaitAnswers(ctx, thread, 2)
	if err != nil || !strings.Contains(answers[1].Text, "chunk 3") {
		t.Fatalf("the message sent from the page did not run: %+v, %v", answers, err)
	}
	if err := w.Srv.WaitFor(ctx, func() bool {
		_, page = alice.get(path)
		return strings.Contains(page, "chunk 3")
	}); err != nil {
		t.Fatalf("the page does not show the second turn: %v\n%s", err, page)
	}
}

// Someone the access lists do not allow gets no link, and so sees no
// thread.
func TestWeb_WhoMayNotUseTheBotGetsNoLink(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0", "discord.allowed_users": []string{brokertest.Alice.ID}})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := w.Discord.Slash(ctx, w.Channel, brokertest.Bob, "web")
	if err != nil {
		t.Fatal(err)
	}
	if signInLink.MatchString(r.Content) || r.Flags&64 == 0 {
		t.Fatalf("bob, on no allowed list, was answered %q (flags %d)", r.Content, r.Flags)
	}
}

// The agent's question shows on the page as a form; filled in there, its
// answer reaches the agent, typed as the question asks, and the chat's
// question says who answered, and where.
func TestWeb_AQuestionAnsweredOnThePageReachesTheAgent(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "elicit-form")
	if err != nil {
		t.Fatal(err)
	}
	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	path := base + "/t/discord/" + thread
	var page string
	if err := w.Srv.WaitFor(ctx, func() bool {
		_, page = alice.get(path)
		return strings.Contains(page, `class="ask question"`)
	}); err != nil {
		t.Fatalf("the page shows no question: %v\n%s", err, page)
	}
	for _, field := range []string{`name="f:name"`, `name="f:count"`, `name="f:colour"`, `name="f:ship"`} {
		if !strings.Contains(page, field) {
			t.Errorf("the question's form has no %s", field)
		}
	}
	ask := regexp.MustCompile(`name="ask" value="([^"]+)"`).FindStringSubmatch(page)[1]
	token := formToken.FindStringSubmatch(page)[1]
	if resp, body := alice.post(path+"/answer", url.Values{"csrf": {token}, "ask": {ask}, "action": {"accept"}, "f:name": {"Ada"}, "f:count": {"11"}, "f:colour": {"green"}}); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a count out of its range: %d %s", resp.StatusCode, body)
	}
	if resp, body := alice.post(path+"/answer", url.Values{"csrf": {token}, "ask": {ask}, "action": {"accept"}, "f:name": {"Ada"}, "f:count": {"3"}, "f:colour": {"green"}, "f:ship": {"true"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the answer: %d %s", resp.StatusCode, body)
	}
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
	if err != nil || !strings.Contains(answers[0].Text, `answer: accept {"colour":"green","count":3,"name":"Ada","ship":true}`) {
		t.Fatalf("the agent's answer: %+v, %v", answers, err)
	}
	if err := w.Srv.WaitFor(ctx, func() bool {
		for _, m := range w.Srv.Messages(thread) {
			if strings.Contains(m.Content, "answered on the web") && len(m.Buttons()) == 0 {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the chat's question does not say it was answered on the web: %v", err)
	}
}

// web.trusted_proxies reaches the web front end: behind a proxy it
// trusts (here the test itself, on loopback), the sign-in's limit is the
// client's that X-Forwarded-For names, not the proxy's.
func TestWeb_TrustedProxiesLimitSignInsByTheForwardedClient(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0", "web.trusted_proxies": []string{"127.0.0.0/8"}})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := w.Discord.Slash(ctx, w.Channel, brokertest.Alice, "web")
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := strings.Cut(signInLink.FindString(r.Content), "/signin")
	u := newWebUser(t)
	try := func(client string) int {
		req, _ := http.NewRequest("POST", base+"/signin", strings.NewReader(url.Values{"t": {"guessed"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", client)
		resp, _ := u.do(req)
		return resp.StatusCode
	}
	for range 10 {
		try("203.0.113.5")
	}
	if code := try("203.0.113.5"); code != http.StatusTooManyRequests {
		t.Fatalf("the 11th try of one client: %d, want 429", code)
	}
	if code := try("203.0.113.6"); code != http.StatusForbidden {
		t.Fatalf("another client behind the same proxy: %d, want its guess refused (403), not limited", code)
	}
}

// An agent's tool calls of huge raw input (16 of 1 MiB) count against
// what the web front end keeps of a turn: it keeps 8 MiB of them and
// says the rest is left out, where the chat has it; the answer after
// them is still shown.
func TestWeb_AHostileAgentsHugeRawInputIsBounded(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	// 16 MiB of raw input, twice the bound of a turn's tool calls, under
	// -race on a busy machine takes a while to pass through the agent's pipe.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "flood-input 16 1024")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	u, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	resp, page := u.get(base + "/t/discord/" + thread)
	if resp.StatusCode != 200 || !strings.Contains(page, "sent 16 inputs") {
		t.Fatalf("the thread's page: %d", resp.StatusCode)
	}
	if !strings.Contains(page, "The rest of this turn&#39;s updates are too many to keep here") &&
		!strings.Contains(page, "The rest of this turn's updates are too many to keep here") {
		t.Errorf("the page keeps 16 MiB of raw input without saying any is left out")
	}
	if n := strings.Count(page, `class="tool `); n >= 16 || n == 0 {
		t.Errorf("the page shows %d of the 16 tool calls, want those within 8 MiB", n)
	}
}
