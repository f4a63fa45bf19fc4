package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/chat/thread"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a test's clock, moved by hand.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

// threadsOf is a platform's threads for the page tests: who may see and
// act on each, and what was done.
type threadsOf struct {
	mu      sync.Mutex
	see     map[string][]string // thread → users who may see it
	act     map[string][]string // thread → users who may act on it
	done    []string
	permits []string
}

func (f *threadsOf) has(m map[string][]string, th, u string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range m[th] {
		if x == u {
			return true
		}
	}
	return false
}
func (f *threadsOf) MaySee(th string, u thread.User) bool { return f.has(f.see, th, u.ID) }
func (f *threadsOf) MayAct(th string, u thread.User) bool { return f.has(f.act, th, u.ID) }
func (f *threadsOf) CancelFor(th string, u thread.User, via string) (bool, error) {
	if !f.MayAct(th, u) {
		return false, thread.ErrNotAllowed
	}
	f.mu.Lock()
	f.done = append(f.done, "cancel "+th+" by "+u.ID)
	f.mu.Unlock()
	return true, nil
}
func (f *threadsOf) PermitFor(req *acp.PermissionRequest, option string, u thread.User, via string) error {
	f.mu.Lock()
	f.permits = append(f.permits, option+" by "+u.ID)
	f.mu.Unlock()
	return nil
}
func (f *threadsOf) AnswerFor(q *acp.ElicitationRequest, res acp.ElicitationResult, u thread.User, via string) error {
	return nil
}
func (f *threadsOf) SendFor(ctx context.Context, th string, u thread.User, via, text string) error {
	f.mu.Lock()
	f.done = append(f.done, "send "+text+" by "+u.ID)
	f.mu.Unlock()
	return nil
}
func (f *threadsOf) Conversation(th string) (string, string, bool) { return "C1", "", true }

// site is a Server under test behind httptest, with one platform,
// "chat".
type site struct {
	t     *testing.T
	s     *Server
	clock *clock
	ts    *httptest.Server
	chat  *threadsOf
	web   thread.Web // what the platform's Server is given
}

func newSite(t *testing.T, cfg Config) *site {
	t.Helper()
	c := newClock()
	cfg.Now = c.now
	s := New(cfg)
	ts := httptest.NewServer(s.Handler())
	s.mu.Lock()
	if s.base == "" {
		s.base = ts.URL
	}
	s.mu.Unlock()
	chat := &threadsOf{see: map[string][]string{}, act: map[string][]string{}}
	web := s.Platform("chat", chat)
	t.Cleanup(func() {
		ts.Close()
		s.Close(context.Background())
	})
	return &site{t: t, s: s, clock: c, ts: ts, chat: chat, web: web}
}

// browser is a client with its own cookies that follows no redirect.
func (x *site) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// link is a sign-in link's token for user of "chat", to th.
func (x *site) link(user, th string) string {
	x.t.Helper()
	l, err := x.s.SignInLink(Person{Platform: "chat", User: thread.User{ID: user, Name: user}}, th)
	if err != nil {
		x.t.Fatal(err)
	}
	u, err := url.Parse(l)
	if err != nil || !strings.HasPrefix(l, x.s.URL()+"/signin?t=") {
		x.t.Fatalf("link %q", l)
	}
	return u.Query().Get("t")
}

// signIn posts the sign-in form of token tok.
func (x *site) signIn(c *http.Client, tok string) *http.Response {
	x.t.Helper()
	resp, err := c.PostForm(x.ts.URL+"/signin", url.Values{"t": {tok}})
	if err != nil {
		x.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (x *site) get(c *http.Client, path string) (*http.Response, string) {
	x.t.Helper()
	resp, err := c.Get(x.ts.URL + path)
	if err != nil {
		x.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestSignIn_ALinkSignsInOnceAndRedirectsToItsThread(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	tok := x.link("alice", "T1")
	c := x.browser()
	if resp, body := x.get(c, "/signin?t="+tok); resp.StatusCode != 200 || !strings.Contains(body, `id="signin-form"`) {
		t.Fatalf("the link's page: %d\n%s", resp.StatusCode, body)
	}
	// Seeing the page did not spend the link (a chat's preview sees it).
	resp := x.signIn(c, tok)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/t/chat/T1" {
		t.Fatalf("sign-in: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := x.get(c, "/t/chat/T1"); resp.StatusCode != 200 || !strings.Contains(body, `id="thread"`) {
		t.Fatalf("the thread's page after signing in: %d\n%s", resp.StatusCode, body)
	}
	other := x.browser()
	if resp := x.signIn(other, tok); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the link used a second time: %d, want 403", resp.StatusCode)
	}
	if resp, _ := x.get(other, "/threads"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the second browser is signed in: %d", resp.StatusCode)
	}
}

func TestSignIn_ALinkExpiresAfterTenMinutes(t *testing.T) {
	x := newSite(t, Config{})
	early, late := x.link("alice", ""), x.link("alice", "")
	x.clock.add(LinkTTL - time.Second)
	if resp := x.signIn(x.browser(), early); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a link a second before it expires: %d", resp.StatusCode)
	}
	x.clock.add(time.Second)
	if resp := x.signIn(x.browser(), late); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a link ten minutes old: %d, want 403", resp.StatusCode)
	}
}

func TestSignIn_ALinkIsBoundToItsUser(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	c := x.browser()
	x.signIn(c, x.link("bob", "T1"))
	if resp, _ := x.get(c, "/t/chat/T1"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob's sign-in sees alice's thread: %d", resp.StatusCode)
	}
	if _, body := x.get(c, "/threads"); !strings.Contains(body, `id="who">bob<`) {
		t.Fatalf("the list is not bob's:\n%s", body)
	}
}

func TestSignIn_TheCookieIsHttpOnlyStrictAndSecureBehindHTTPS(t *testing.T) {
	for _, public := range []string{"", "https://broker.example.com"} {
		x := newSite(t, Config{PublicURL: public})
		resp := x.signIn(x.browser(), x.link("alice", ""))
		var got *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == cookieName {
				got = c
			}
		}
		if got == nil {
			t.Fatalf("%q: no session cookie", public)
		}
		if !got.HttpOnly || got.SameSite != http.SameSiteStrictMode || got.Secure != (public != "") {
			t.Errorf("%q: cookie %+v: want HttpOnly, SameSite=Strict, Secure=%v", public, got, public != "")
		}
		if resp.Header.Get("Location") == "" || strings.Contains(resp.Header.Get("Location"), "t=") {
			t.Errorf("%q: redirected to %q", public, resp.Header.Get("Location"))
		}
	}
}

func TestSignIn_SessionsLastTheirTTLAndSignOutEndsThem(t *testing.T) {
	x := newSite(t, Config{SessionTTL: time.Hour})
	c := x.browser()
	x.signIn(c, x.link("alice", ""))
	x.clock.add(time.Hour - time.Second)
	resp, body := x.get(c, "/threads")
	if resp.StatusCode != 200 {
		t.Fatalf("a session within its TTL: %d", resp.StatusCode)
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form token in\n%s", body)
	}
	out, err := c.PostForm(x.ts.URL+"/signout", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
	if out.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", out.StatusCode)
	}
	if resp, _ := x.get(c, "/threads"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after signing out: %d", resp.StatusCode)
	}
	d := x.browser()
	x.signIn(d, x.link("alice", ""))
	x.clock.add(time.Hour)
	if resp, _ := x.get(d, "/threads"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a session past its TTL: %d", resp.StatusCode)
	}
}

func TestCSRF_AControlWithoutTheFormTokenIsRefused(t *testing.T) {
	x := newSite(t, Config{})
	x.chat.see["T1"] = []string{"alice"}
	x.chat.act["T1"] = []string{"alice"}
	c := x.browser()
	x.signIn(c, x.link("alice", "T1"))
	_, body := x.get(c, "/t/chat/T1")
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form token in\n%s", body)
	}
	post := func(token string, header map[string]string) int {
		req, _ := http.NewRequest("POST", x.ts.URL+"/t/chat/T1/cancel", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("", nil); code != http.StatusForbidden {
		t.Errorf("no token: %d, want 403", code)
	}
	if code := post("forged", nil); code != http.StatusForbidden {
		t.Errorf("a forged token: %d, want 403", code)
	}
	if code := post(m[1], map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Errorf("the token from another site: %d, want 403", code)
	}
	if len(x.chat.done) != 0 {
		t.Fatalf("a refused request acted: %v", x.chat.done)
	}
	if code := post(m[1], nil); code != http.StatusSeeOther {
		t.Errorf("with the token: %d, want 303", code)
	}
	if len(x.chat.done) != 1 {
		t.Fatalf("done: %v", x.chat.done)
	}
}

func TestHeaders_EveryPageHasAStrictContentSecurityPolicy(t *testing.T) {
	x := newSite(t, Config{})
	c := x.browser()
	x.signIn(c, x.link("alice", ""))
	for _, path := range []string{"/", "/signin?t=x", "/threads", "/admin/signin", "/static/app.js", "/nothing"} {
		resp, _ := x.get(c, path)
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: %q allows inline code", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
}

func TestSignIn_TooManyTriesFromOneAddressAre429(t *testing.T) {
	x := newSite(t, Config{})
	c := x.browser()
	codes := map[int]int{}
	for range signInsPerMin + 1 {
		codes[x.signIn(c, "guessed").StatusCode]++
	}
	if codes[http.StatusForbidden] != signInsPerMin || codes[http.StatusTooManyRequests] != 1 {
		t.Fatalf("%d tries: %v, want %d refused and then 429", signInsPerMin+1, codes, signInsPerMin)
	}
	// A good link is refused too while the address waits, and taken
	// once its minute has passed.
	tok := x.link("alice", "")
	if code := x.signIn(c, tok).StatusCode; code != http.StatusTooManyRequests {
		t.Fatalf("a good link while limited: %d", code)
	}
	x.clock.add(time.Minute)
	if code := x.signIn(c, tok).StatusCode; code != http.StatusSeeOther {
		t.Fatalf("a good link after a minute: %d", code)
	}
}

func TestAdmin_AnOperatorTokenSignsInToTheOperatorsView(t *testing.T) {
	x := newSite(t, Config{
		Admin: func(tok string) (string, bool) { return "ops", tok == "ops-token-0123456789" },
		Status: func(context.Context) []Section {
			return []Section{{Title: "Pool", Lines: []string{"2 of 8 agents running"}}}
		},
	})
	c := x.browser()
	resp, err := c.PostForm(x.ts.URL+"/admin/signin", url.Values{"token": {"wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a wrong token: %d", resp.StatusCode)
	}
	resp, err = c.PostForm(x.ts.URL+"/admin/signin", url.Values{"token": {"ops-token-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the operator's token: %d", resp.StatusCode)
	}
	if resp, body := x.get(c, "/admin"); resp.StatusCode != 200 || !strings.Contains(body, "2 of 8 agents running") {
		t.Fatalf("the operator's view: %d\n%s", resp.StatusCode, body)
	}
	person := x.browser()
	x.signIn(person, x.link("alice", ""))
	if resp, _ := x.get(person, "/admin"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a chat user's view of /admin: %d", resp.StatusCode)
	}
}

// signInFrom tries to sign in with tok, the proxy's X-Forwarded-For
// being xff ("": none).
func (x *site) signInFrom(xff, tok string) int {
	x.t.Helper()
	req, _ := http.NewRequest("POST", x.ts.URL+"/signin", strings.NewReader(url.Values{"t": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", x.ts.URL)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := x.browser().Do(req)
	if err != nil {
		x.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Behind a trusted proxy, sign-ins are limited by the client's address,
// the rightmost of X-Forwarded-For that is no trusted proxy's: one
// client's tries do not lock out another behind the same proxy, and
// what a client writes left of it does not free it of its limit.
func TestSignIn_BehindATrustedProxyTheLimitIsTheClients(t *testing.T) {
	x := newSite(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}})
	for i := range signInsPerMin {
		if code := x.signInFrom(fmt.Sprintf("198.51.100.%d, 203.0.113.5, 10.1.2.3", i), "guessed"); code != http.StatusForbidden {
			t.Fatalf("try %d from 203.0.113.5: %d", i+1, code)
		}
	}
	if code := x.signInFrom("192.0.2.77, 203.0.113.5", "guessed"); code != http.StatusTooManyRequests {
		t.Fatalf("203.0.113.5, past its limit, claiming another address left of it: %d, want 429", code)
	}
	if code := x.signInFrom("203.0.113.6", x.link("alice", "")); code != http.StatusSeeOther {
		t.Fatalf("another client behind the same proxy: %d, want signed in", code)
	}
}

// From a peer that is no trusted proxy, X-Forwarded-For is the client's
// own word and ignored: the limit is the connection's address's.
func TestSignIn_FromAnUntrustedPeerForwardedForIsIgnored(t *testing.T) {
	for _, trusted := range [][]netip.Prefix{nil, {netip.MustParsePrefix("10.0.0.0/8")}} {
		x := newSite(t, Config{TrustedProxies: trusted})
		for i := range signInsPerMin {
			if code := x.signInFrom(fmt.Sprintf("203.0.113.%d", i), "guessed"); code != http.StatusForbidden {
				t.Fatalf("trusting %v, try %d: %d", trusted, i+1, code)
			}
		}
		if code := x.signInFrom("203.0.113.200", x.link("alice", "")); code != http.StatusTooManyRequests {
			t.Fatalf("trusting %v, a new X-Forwarded-For from the same peer: %d, want 429", trusted, code)
		}
	}
}
