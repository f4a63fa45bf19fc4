package faults

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// On Slack as on Discord, the broker starts turns itself: a prompt
// through the HTTP API with platform "slack" opens a thread in the Slack
// channel from the app's message, streams its answer there, and links
// to it; a token for Discord's channel only is refused Slack's; a
// schedule with platform "slack" opens a thread for each run in its
// Slack channel, and `/acp schedules` lists it there; `broker audit
// --schedules` lists its runs.
func TestSlack_APIPromptsAndSchedulesRunInSlackThreads(t *testing.T) {
	w := newWorld(t, setup{slack: true, conf: settings{
		"chat.platform": []string{"discord", "slack"},
		"api.listen":    "127.0.0.1:0",
	}})
	sc := w.Slack.Channel
	w.Raw = apiTokens("slack:"+sc) + fmt.Sprintf(`
[[schedules]]
name = "often"
schedule = "@every 2s"
platform = "slack"
channel = %q
prompt = "stream 2 10ms"
`, sc)
	b := w.start()
	s := w.front("slack")

	c := b.client(ciToken)
	p := c.start(map[string]any{"platform": "slack", "channel": sc, "text": "stream 3 20ms"})
	channel, ts, ok := strings.Cut(p.Thread, "/")
	if p.Platform != "slack" || p.Channel != sc || !ok || channel != sc || ts == "" {
		t.Fatalf("202 answered %+v, want a thread of %s on slack", p, sc)
	}
	if !strings.Contains(p.Link, "/archives/"+sc+"/p"+strings.ReplaceAll(ts, ".", "")) {
		t.Errorf("the prompt's link %q is not the permalink of message %s", p.Link, ts)
	}
	if end := endOf(t, c.events(p.ID)); end.State != "done" {
		t.Errorf("the API's prompt ended %+v", end)
	}
	got := s.awaitAnswers(ts, 1)[0]
	if !strings.Contains(got.text, "chunk 3") || !strings.Contains(got.footer, "✅") {
		t.Errorf("the Slack thread shows %q / %q", got.text, got.footer)
	}
	opener, _ := w.Slack.Srv.Message(sc, ts)
	if !strings.Contains(w.Slack.Text(opener), "stream 3 20ms") || !strings.Contains(w.Slack.Text(opener), "ci") {
		t.Errorf("the message the thread hangs from: %q", w.Slack.Text(opener))
	}
	s.awaitReaction(ts, ts, "✅")

	// A second prompt into the same thread is its next turn there.
	p2 := c.start(map[string]any{"platform": "slack", "thread": p.Thread, "text": "hello again"})
	if p2.Thread != p.Thread {
		t.Errorf("the follow-up ran in %s, not %s", p2.Thread, p.Thread)
	}
	s.awaitAnswers(ts, 2)

	// The viewer may use Discord's channel only.
	if code, raw := b.client(viewerToken).do("POST", "/v1/prompts", map[string]any{"platform": "slack", "channel": sc, "text": "x"}, nil); code != 403 {
		t.Errorf("a token for Discord's channel, on Slack's: %d %s", code, raw)
	}

	// The schedule's runs open threads in the Slack channel.
	var runs []string
	w.Slack.Srv.Await("two runs of the schedule in Slack", func() bool {
		runs = runs[:0]
		for _, m := range w.Slack.Srv.Messages(sc) {
			if strings.Contains(w.Slack.Text(m), "Schedule *often*") || strings.Contains(w.Slack.Text(m), "Schedule **often**") {
				runs = append(runs, m.TS)
			}
		}
		return len(runs) >= 2
	})
	if a := s.awaitAnswers(runs[0], 1)[0]; !strings.Contains(a.text, "chunk 2") {
		t.Errorf("the schedule's first run answered %q", a.text)
	}
	// /acp schedules lists it in the channel.
	w.Slack.Srv.SlashCommand(sc, w.Slack.Alice.ID, "/acp", "schedules")
	s.(*slackFront).whispered(pAlice, "*often*", 0)
	out, err := exec.Command(w.Bins.Broker, "audit", "--schedules", "--config", w.writeConfig()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "often") || !strings.Contains(string(out), "slack:"+sc+"/") {
		t.Errorf("broker audit --schedules: %v\n%s", err, out)
	}
}
