package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/browsertest"
	"acpbroker/internal/fakediscord"
)

// The web front end in a headless Chromium, through the whole broker and
// the fake Discord: what a person sees and does in the pages, and that
// nothing but the pages' own script runs in them.

// askWeb has who ask /web in where and returns the link it answers them
// privately with.
func askWeb(ctx context.Context, t *testing.T, w *brokertest.World, where string, who fakediscord.User) string {
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
	return link
}

// browse has who ask /web in where and sign in with its link in a new
// browser; it returns the browser, on the page signing in led to, and
// the web front end's address.
func browse(ctx context.Context, t *testing.T, w *brokertest.World, where string, who fakediscord.User) (*browsertest.Browser, string) {
	t.Helper()
	link := askWeb(ctx, t, w, where, who)
	br := browsertest.New(t)
	br.Navigate(link)
	br.Click("#signin")
	br.WaitText("#who", who.GlobalName)
	base, _, _ := strings.Cut(link, "/signin")
	return br, base
}

// evalAsync evaluates a JavaScript expression that yields a promise and
// waits for what it settles to, as JSON.
func evalAsync(t *testing.T, br *browsertest.Browser, expr string, out any) {
	t.Helper()
	br.Eval(`(() => { window.__settled = undefined; Promise.resolve(`+expr+`).then(v => { window.__settled = JSON.stringify(v); }, e => { window.__settled = JSON.stringify("error: " + e); }); return true; })()`, nil)
	var s string
	deadline := time.Now().Add(browsertest.StepTimeout)
	for {
		br.Eval(`window.__settled === undefined ? "" : window.__settled`, &s)
		if s != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not settle", expr)
		}
		<-time.After(20 * time.Millisecond)
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		t.Fatalf("%s settled to %s: %v", expr, s, err)
	}
}

// count is how many elements match the CSS selector in the page now.
func count(br *browsertest.Browser, selector string) int {
	var n int
	br.Eval(fmt.Sprintf(`document.querySelectorAll(%q).length`, selector), &n)
	return n
}

// waitCount waits until n elements match the CSS selector in the page.
func waitCount(t *testing.T, br *browsertest.Browser, selector string, n int) {
	t.Helper()
	deadline := time.Now().Add(browsertest.StepTimeout)
	for {
		got := count(br, selector)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d elements match %s, want %d", got, selector, n)
		}
		<-time.After(20 * time.Millisecond)
	}
}

// The link /web gives is shown to its asker alone, and signs in once: in
// a browser, Sign in leads to the threads, and the same link again is
// refused in another browser.
func TestWebBrowser_TheLinkIsTheAskersAndSignsInOnce(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	link := askWeb(ctx, t, w, w.Channel, brokertest.Alice)
	for _, m := range w.Srv.Messages(w.Channel) {
		if strings.Contains(m.Content, "/signin?t=") && m.Flags&64 == 0 {
			t.Fatalf("the link is in the channel for everyone: %+v", m)
		}
	}
	_, token, _ := strings.Cut(link, "/signin?t=")
	if bob := askWeb(ctx, t, w, w.Channel, brokertest.Bob); strings.Contains(bob, token) {
		t.Fatalf("bob was given alice's link: %s", bob)
	}

	alice := browsertest.New(t)
	alice.Navigate(link)
	alice.Click("#signin")
	alice.WaitText("#who", "Alice")
	alice.WaitText("h1", "Threads")
	alice.NoXSS()
	if v := alice.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}

	again := browsertest.New(t)
	again.Navigate(link)
	if count(again, "#signin") == 1 {
		again.Click("#signin")
	}
	again.WaitText("main", "Sign in from the chat")
	if n := count(again, "#who"); n != 0 {
		t.Fatalf("the link signed in a second time: the page names who is signed in")
	}
	again.Navigate(strings.TrimSuffix(link[:strings.Index(link, "/signin")], "/") + "/threads")
	if n := count(again, "#threads, #who"); n != 0 {
		t.Fatalf("the refused browser is shown the threads")
	}
}

// The thread's page, open while the agent streams, shows the turn's
// chunks as they come (the page is seen part way, then whole), the whole
// answer however long, and an edit as a diff.
func TestWebBrowser_TheThreadPageStreamsTheWholeAnswerAndShowsADiff(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	br, _ := browse(ctx, t, w, thread, brokertest.Alice)
	br.WaitText("#turns", "You said: hello")
	if a, n := count(br, "#turns .author"), count(br, "#turns > .turn"); a != n {
		t.Errorf("the page names the author %d times in %d turns", a, n)
	}

	w.Discord.Post(thread, brokertest.Alice, "stream 300 20ms")
	br.WaitText("#turns", "chunk 20\n")
	var partial string
	br.Eval(`document.getElementById("turns").textContent`, &partial)
	if !strings.Contains(partial, "chunk 20\n") || strings.Contains(partial, "chunk 300\n") {
		t.Fatalf("the page was not seen part way through the turn:\n%s", partial)
	}
	br.WaitText("#turns", "chunk 300\n")
	var answer string
	for i := 1; i <= 300; i++ {
		answer += fmt.Sprintf("chunk %d\n", i)
	}
	var shown string
	br.Eval(`document.getElementById("turns").textContent`, &shown)
	if len(answer) <= 2000 || !strings.Contains(shown, answer) {
		t.Fatalf("the page does not show the whole answer of %d characters:\n%s", len(answer), shown)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 2); err != nil {
		t.Fatal(err)
	}

	w.Discord.Post(thread, brokertest.Alice, "diff")
	br.WaitText("#turns .diff", "main.go")
	if n := count(br, "#turns .diff .diff-add"); n == 0 {
		t.Errorf("the diff shows no added line")
	}
	if n := count(br, "#turns .diff .diff-del"); n == 0 {
		t.Errorf("the diff shows no removed line")
	}
	br.Click("#turns details:has(.diff) > summary")
	var gap float64 // between a diff's lines, in lines: 1 when they follow each other
	br.Eval(`(() => {
		const l = document.querySelectorAll("#turns .diff pre > span");
		const a = l[0].getBoundingClientRect(), b = l[1].getBoundingClientRect();
		return (b.top - a.top) / a.height;
	})()`, &gap)
	if gap < 0.9 || gap > 1.1 {
		t.Errorf("a diff's next line is %.2f lines below the one before, want 1", gap)
	}
	br.NoXSS()
	if v := br.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}
}

// A page that followed its turns live, each update the blocks that
// changed, holds them as a page loaded after they ended shows them: a
// tool call's progress, a streamed answer, a fenced code block grown a
// line at a time. A tool call the person opened stays open as it changes.
func TestWebBrowser_ALivePageEndsAsAFreshOneShowsTheTurns(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	br, base := browse(ctx, t, w, thread, brokertest.Alice)
	br.WaitText("#turns", "You said: hello")
	w.Discord.Post(thread, brokertest.Alice, "tool-progress 150ms 8")
	br.WaitText("#turns", "step 1")
	br.Click("#turns > .turn:last-child details.tool > summary")
	br.WaitText("#turns", "compiled")
	var open bool
	br.Eval(`document.querySelector("#turns > .turn:last-child details.tool").open`, &open)
	if !open {
		t.Errorf("the tool call the person opened closed as it changed")
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 2); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "stream 120 10ms")
	br.WaitText("#turns", "chunk 120\n")
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 3); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "code 400")
	br.WaitText("#turns", "That is all.")
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 4); err != nil {
		t.Fatal(err)
	}
	waitCount(t, br, "#turns article.turn-done", 4)
	const articles = `JSON.stringify(Array.from(document.querySelectorAll("#turns article"), a => {
		for (const d of a.querySelectorAll("details")) d.open = false;
		return a.outerHTML; }))`
	var live, fresh string
	br.Eval(articles, &live)
	br.Navigate(base + "/t/discord/" + thread)
	br.WaitText("#turns", "That is all.")
	br.Eval(articles, &fresh)
	var a, b []string
	json.Unmarshal([]byte(live), &a)
	json.Unmarshal([]byte(fresh), &b)
	if len(a) != 4 || len(b) != 4 {
		t.Fatalf("%d turns live, %d loaded, want 4", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("turn %d, live:\n%s\nloaded:\n%s", i+1, a[i], b[i])
		}
	}
	br.NoXSS()
	if v := br.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}
}

// A permission request answered by a click on the thread's page reaches
// the agent, and the chat's request loses its buttons and says it was
// answered on the web; Cancel on the page stops a running turn.
func TestWebBrowser_PermissionAndCancelFromThePage(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "permission")
	if err != nil {
		t.Fatal(err)
	}
	req, err := w.Discord.PermissionRequest(ctx, thread)
	if err != nil {
		t.Fatal(err)
	}
	br, _ := browse(ctx, t, w, thread, brokertest.Alice)
	br.WaitText("#controls .ask", "Permission needed")
	br.Click(`#controls .ask button[data-option="reject"]`)
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 1)
	if err != nil || !strings.Contains(answers[0].Text, "reject") {
		t.Fatalf("the agent's answer after Reject on the page: %+v, %v", answers, err)
	}
	if err := w.Srv.WaitFor(ctx, func() bool {
		m, ok := w.Srv.Message(thread, req.ID)
		return ok && len(m.Buttons()) == 0 && strings.Contains(m.Content, "on the web")
	}); err != nil {
		t.Fatalf("the chat's request does not say it was answered on the web: %v", err)
	}
	waitCount(t, br, "#controls .ask", 0) // the page's controls follow: the request is gone

	w.Discord.Post(thread, brokertest.Alice, "hang")
	br.WaitText("#turns", "working…")
	br.Click("#cancel")
	answers, err = w.Discord.AwaitAnswers(ctx, thread, 2)
	if err != nil || !strings.Contains(answers[1].Text, "on the web") {
		t.Fatalf("the turn cancelled on the page: %+v, %v", answers, err)
	}
	br.NoXSS()
	if v := br.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}
}

// Who may see a thread but not act on it is shown no control in the
// page, and what they post to one anyway from the page is refused; who is
// on no allowed list gets no link, and a browser with no sign-in is shown
// no thread.
func TestWebBrowser_WhoMayNotActSeesNoControls(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0",
		"discord.allowed_users": []string{brokertest.Alice.ID, brokertest.Bob.ID}})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "permission")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.PermissionRequest(ctx, thread); err != nil {
		t.Fatal(err)
	}
	alice, base := browse(ctx, t, w, thread, brokertest.Alice)
	alice.WaitText("#controls .ask", "Permission needed")
	var ask string
	alice.Eval(`document.querySelector("#controls .ask").dataset.ask`, &ask)

	bob, _ := browse(ctx, t, w, thread, brokertest.Bob)
	bob.WaitText("#turns", "permission")
	if n := count(bob, "#controls .ask, #cancel-form, #cancel"); n != 0 {
		t.Fatalf("bob, who may not act on alice's thread, is shown %d controls", n)
	}
	forge := func(action string, fields string) int {
		var status int
		evalAsync(t, bob, `fetch(location.pathname + "/`+action+`", {method: "POST", credentials: "same-origin",
			headers: {"Accept": "application/json"},
			body: new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value`+fields+`})}).then(r => r.status)`, &status)
		return status
	}
	if s := forge("permit", `, ask: `+fmt.Sprintf("%q", ask)+`, option: "allow"`); s != 403 {
		t.Errorf("bob's answer posted from the page: %d, want 403", s)
	}
	if s := forge("cancel", ""); s != 403 {
		t.Errorf("bob's cancel posted from the page: %d, want 403", s)
	}
	if n := count(alice, "#controls .ask"); n != 1 {
		t.Errorf("alice's request is gone after bob's forged answer")
	}

	r, err := w.Discord.Slash(ctx, thread, brokertest.Carol, "web")
	if err != nil {
		t.Fatal(err)
	}
	if signInLink.MatchString(r.Content) {
		t.Fatalf("carol, on no allowed list, was given a link: %q", r.Content)
	}
	carol := browsertest.New(t)
	carol.Navigate(base + "/t/discord/" + thread)
	carol.WaitText("main", "Sign in from the chat")
	carol.Navigate(base + "/threads")
	carol.WaitText("main", "Sign in from the chat")
	var text string
	carol.Eval(`document.body.textContent`, &text)
	if strings.Contains(text, "permission") || strings.Contains(text, thread) {
		t.Fatalf("a browser with no sign-in is shown alice's thread:\n%s", text)
	}
}

// hostile is what a hostile agent or person writes to run script in
// whoever reads it: each part sets browsertest.XSSMark if it runs.
const hostile = `<script>window.__xss=1</script> <img src=x onerror="window.__xss=1"> [click me](javascript:window.__xss=1) <b id="raw">raw</b> <a href="javascript:window.__xss=1" id="rawlink">raw link</a> <style>body{display:none}</style>`

// What an agent answers and a person writes is text in the browser: its
// script, its onerror, its javascript: link and its raw HTML render as
// the characters they are, run nothing, and our pages break no rule of
// their own Content Security Policy, on the thread's page and the list.
func TestWebBrowser_HostileTextIsText(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, hostile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	br, _ := browse(ctx, t, w, thread, brokertest.Alice)
	br.WaitText("#turns", "You said:")
	br.WaitText("#turns", `<script>window.__xss=1</script>`)
	br.WaitText("#turns", `<img src=x onerror="window.__xss=1">`)
	br.WaitText("#turns", `<b id="raw">raw</b>`)
	for _, sel := range []string{"#turns script", "#turns img", "#raw", "#rawlink", "#turns style", `#turns a[href^="javascript"]`, "#turns [onerror]"} {
		if n := count(br, sel); n != 0 {
			t.Errorf("the page has %d %s from what the agent wrote", n, sel)
		}
	}
	var hidden bool
	br.Eval(`getComputedStyle(document.body).display === "none"`, &hidden)
	if hidden {
		t.Errorf("the agent's <style> styled the page")
	}
	br.NoXSS()
	if v := br.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}
	br.Click(".home")
	br.WaitText("#threads", "")
	br.NoXSS()
	if n := count(br, "#threads script, #threads img, #raw"); n != 0 {
		t.Errorf("the list has %d elements of what the person wrote", n)
	}
	if v := br.CSPViolations(); len(v) != 0 {
		t.Errorf("our own pages broke their policy: %q", v)
	}
}

// An agent's hostile permission request (its tool call's title) and
// hostile question (its message, a field's title and description, a
// choice's label) show in the page's controls as text, and run nothing.
func TestWebBrowser_HostileRequestsAreText(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const tag = `<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>`
	perm, err := w.Discord.Mention(ctx, brokertest.Alice, "permission-for - - "+tag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.PermissionRequest(ctx, perm); err != nil {
		t.Fatal(err)
	}
	q, _ := json.Marshal(map[string]any{"message": tag, "requestedSchema": map[string]any{"type": "object",
		"properties": map[string]any{
			"name":   map[string]any{"type": "string", "title": tag, "description": tag},
			"colour": map[string]any{"type": "string", "title": "colour", "oneOf": []any{map[string]any{"const": "red", "title": tag}}},
		}}})
	question, err := w.Discord.Mention(ctx, brokertest.Alice, "elicit-json "+string(q))
	if err != nil {
		t.Fatal(err)
	}
	br, base := browse(ctx, t, w, w.Channel, brokertest.Alice)
	for _, c := range []struct{ thread, selector, says string }{
		{perm, "#controls .ask", "Permission needed"},
		{question, "#controls .ask.question", "The agent asks"},
	} {
		br.Navigate(base + "/t/discord/" + c.thread)
		br.WaitText(c.selector, c.says)
		br.WaitText(c.selector, tag)
		if n := count(br, "#controls img, #controls script, #turns img, #turns script, [onerror]"); n != 0 {
			t.Errorf("%s: the page has %d elements of the agent's", c.says, n)
		}
		br.NoXSS()
		if v := br.CSPViolations(); len(v) != 0 {
			t.Errorf("%s: our own page broke its policy: %q", c.says, v)
		}
	}
}
