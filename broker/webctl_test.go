package broker_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakeslack"
)

// chatSays waits for a message in thread whose text has every one of
// words.
func chatSays(ctx context.Context, t *testing.T, w *brokertest.World, thread string, words ...string) {
	t.Helper()
	if err := w.Srv.WaitFor(ctx, func() bool {
		for _, m := range w.Srv.Messages(thread) {
			all := true
			for _, word := range words {
				all = all && strings.Contains(m.Content, word)
			}
			if all {
				return true
			}
		}
		return false
	}); err != nil {
		var got []string
		for _, m := range w.Srv.Messages(thread) {
			got = append(got, m.Content)
		}
		t.Fatalf("the thread never says %q: %v\n%s", words, err, strings.Join(got, "\n---\n"))
	}
}

// The agent's model, mode and options are offered on the thread's page
// to who may act on it, and a choice made there is made as /model makes
// it: the agent's next turn runs with it, and the chat says who chose it,
// on the web; someone else's forged choice is refused.
func TestWeb_TheAgentsChoicesAreMadeOnThePage(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0", "agent.args": []string{"--config-options"}})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "settings")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	path := base + "/t/discord/" + thread
	_, page := alice.get(path)
	for _, want := range []string{`data-command="model"`, `value="fake-large"`, `data-command="mode"`, `data-command="config" data-option="fast"`, `id="sessions-form"`} {
		if !strings.Contains(page, want) {
			t.Fatalf("the starter's page does not offer %s:\n%s", want, page)
		}
	}
	bob, _, _ := webSignIn(ctx, t, w, thread, brokertest.Bob)
	_, bobPage := bob.get(path)
	if strings.Contains(bobPage, `data-command="model"`) {
		t.Errorf("bob, who may not act on alice's thread, is offered its choices")
	}
	if resp, _ := bob.post(path+"/choose", url.Values{"csrf": {formToken.FindStringSubmatch(bobPage)[1]}, "command": {"model"}, "value": {"fake-huge"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's forged choice: %d, want 403", resp.StatusCode)
	}
	token := formToken.FindStringSubmatch(page)[1]
	if resp, body := alice.post(path+"/choose", url.Values{"csrf": {token}, "command": {"model"}, "value": {"fake-large"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's choice: %d %s", resp.StatusCode, body)
	}
	chatSays(ctx, t, w, thread, "<@"+brokertest.Alice.ID+"> set **Model**", "on the web")
	if resp, body := alice.post(path+"/choose", url.Values{"csrf": {token}, "command": {"mode"}, "value": {"plan"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's mode: %d %s", resp.StatusCode, body)
	}
	w.Discord.Post(thread, brokertest.Alice, "settings")
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 2)
	if err != nil || !strings.Contains(answers[1].Text, "model=fake-large") || !strings.Contains(answers[1].Text, "mode=plan") {
		t.Fatalf("the agent's settings after the page's choices: %+v, %v", answers, err)
	}
	if resp, _ := alice.post(path+"/choose", url.Values{"csrf": {token}, "command": {"model"}, "value": {"no-such-model"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a model the agent does not offer: %d, want 400", resp.StatusCode)
	}
}

// The messages waiting behind a running turn are listed on the thread's
// page; Send now there interrupts the turn for one, as its note's button
// does, and Remove takes another out, its note saying who removed it, on
// the web; who may not act on the thread is offered neither.
func TestWeb_TheQueueOnThePage(t *testing.T) {
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
		t.Fatalf("the turn does not run: %v", err)
	}
	for _, text := range []string{"stream 2 1ms", "stream 5 1ms"} {
		w.Discord.Post(thread, brokertest.Alice, text)
	}
	keys := regexp.MustCompile(`<li data-key="([^"]+)">stream (\d)`)
	var found [][]string
	if err := w.Srv.WaitFor(ctx, func() bool {
		_, page = alice.get(path)
		found = keys.FindAllStringSubmatch(page, -1)
		return len(found) == 2 && strings.Contains(page, `data-action="send-now"`) && strings.Contains(page, `data-action="remove"`)
	}); err != nil {
		t.Fatalf("the page does not list the two waiting messages with their buttons: %v\n%s", err, page)
	}
	bob, _, _ := webSignIn(ctx, t, w, thread, brokertest.Bob)
	_, bobPage := bob.get(path)
	if !strings.Contains(bobPage, `id="queue"`) || strings.Contains(bobPage, `data-action="send-now"`) || strings.Contains(bobPage, `data-action="remove"`) {
		t.Errorf("bob's page does not list the queue without its buttons:\n%s", bobPage)
	}
	if resp, _ := bob.post(path+"/queued", url.Values{"csrf": {formToken.FindStringSubmatch(bobPage)[1]}, "key": {found[0][1]}, "action": {"send-now"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's forged send now: %d, want 403", resp.StatusCode)
	}
	token := formToken.FindStringSubmatch(page)[1]
	if resp, body := alice.post(path+"/queued", url.Values{"csrf": {token}, "key": {found[1][1]}, "action": {"remove"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("remove: %d %s", resp.StatusCode, body)
	}
	chatSays(ctx, t, w, thread, "on the web", "emoved")
	if resp, body := alice.post(path+"/queued", url.Values{"csrf": {token}, "key": {found[0][1]}, "action": {"send-now"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("send now: %d %s", resp.StatusCode, body)
	}
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 2)
	if err != nil || !strings.Contains(answers[0].Text, "on the web") || !strings.Contains(answers[1].Text, "chunk 2") {
		t.Fatalf("send now did not interrupt the turn, saying it was on the web, and run the message: %+v, %v", answers, err)
	}
	if resp, _ := alice.post(path+"/queued", url.Values{"csrf": {token}, "key": {found[1][1]}, "action": {"remove"}}); resp.StatusCode != http.StatusConflict {
		t.Errorf("removing a removed message: %d, want 409", resp.StatusCode)
	}
}

// The thread's page links to the thread in the chat: Open in Discord.
func TestWeb_ThePageLinksToTheChatThread(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "stream 2 1ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	_, page := alice.get(base + "/t/discord/" + thread)
	link := regexp.MustCompile(`<a id="chat-link" href="([^"]+)"[^>]*>Open in Discord</a>`).FindStringSubmatch(page)
	if link == nil || !strings.HasPrefix(link[1], "https://discord.com/channels/") || !strings.Contains(link[1]+"/", "/"+thread+"/") {
		t.Fatalf("the page has no Open in Discord link to its thread: %v\n%s", link, page)
	}
}

// Resume and Fork on the thread's page do what /resume and /fork do, for
// who may act on the thread alone, and the chat says it was on the web.
func TestWeb_ResumeAndForkOnThePage(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0", "agent.args": []string{"-list-sessions", "-resume-session", "-fork-session"}})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "title First steps")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "session")
	answers, err := w.Discord.AwaitAnswers(ctx, thread, 2)
	if err != nil {
		t.Fatal(err)
	}
	first := regexp.MustCompile(`session (\S+)`).FindStringSubmatch(answers[1].Text)
	if first == nil {
		t.Fatalf("the agent names no session: %q", answers[1].Text)
	}
	if _, err := w.Discord.Slash(ctx, thread, brokertest.Alice, "reset"); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "stream 1 1ms")
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 3); err != nil {
		t.Fatal(err)
	}

	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	path := base + "/t/discord/" + thread
	_, page := alice.get(path)
	bob, _, _ := webSignIn(ctx, t, w, thread, brokertest.Bob)
	_, bobPage := bob.get(path)
	if strings.Contains(bobPage, `id="sessions-form"`) {
		t.Errorf("bob, who may not act on alice's thread, is offered resume and fork")
	}
	bobToken := formToken.FindStringSubmatch(bobPage)[1]
	for _, f := range []url.Values{{"command": {"resume"}, "session": {first[1]}}, {"command": {"fork"}}} {
		f.Set("csrf", bobToken)
		if resp, _ := bob.post(path+"/session", f); resp.StatusCode != http.StatusForbidden {
			t.Errorf("bob's forged %s: %d, want 403", f.Get("command"), resp.StatusCode)
		}
	}
	token := formToken.FindStringSubmatch(page)[1]
	if resp, body := alice.post(path+"/session", url.Values{"csrf": {token}, "command": {"resume"}, "session": {first[1]}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resume: %d %s", resp.StatusCode, body)
	}
	chatSays(ctx, t, w, thread, "<@"+brokertest.Alice.ID+"> resumed session `"+first[1]+"`", "on the web")
	if resp, body := alice.post(path+"/session", url.Values{"csrf": {token}, "command": {"fork"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("fork: %d %s", resp.StatusCode, body)
	}
	chatSays(ctx, t, w, thread, "<@"+brokertest.Alice.ID+"> forked this conversation into", "on the web")
}

// A Slack thread's page links to the thread's message in the workspace:
// Open in Slack.
func TestWeb_ASlackThreadsPageLinksToSlack(t *testing.T) {
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
	s.Command(thread, s.Alice, "web")
	e, err := s.Whispered(ctx, s.Alice, "/signin?t=", 0)
	if err != nil {
		t.Fatal(err)
	}
	base, tok, _ := strings.Cut(signInLink.FindString(brokertest.SlackText(e.Blocks, e.Text)), "/signin?t=")
	u := newWebUser(t)
	resp, _ := u.post(base+"/signin", url.Values{"t": {tok}})
	_, page := u.get(base + resp.Header.Get("Location"))
	link := regexp.MustCompile(`<a id="chat-link" href="([^"]+)"[^>]*>Open in Slack</a>`).FindStringSubmatch(page)
	if link == nil || !regexp.MustCompile(`^https://[a-z0-9-]+\.slack\.com/archives/`+s.Channel+`/p\d+`).MatchString(link[1]) {
		t.Fatalf("the page has no Open in Slack link to its thread: %v\n%s", link, page)
	}
}
