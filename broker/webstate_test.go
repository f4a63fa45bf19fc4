package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// The web front end's threads and turns survive a restart: a turn, the
// broker stopped and opened again on the same state directory, and the
// list and the thread's page show the earlier turn, its whole answer,
// and a turn the shutdown ended as it ended.
func TestWeb_TheThreadsAndTurnsSurviveARestart(t *testing.T) {
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	b := open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "stream 5 1ms before the restart")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	hang, err := w.Discord.Mention(ctx, brokertest.Bob, "hang")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitBotText(ctx, hang, "working…", 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	open(t, w)
	alice, base, _ := webSignIn(ctx, t, w, thread, brokertest.Alice)
	resp, list := alice.get(base + "/threads")
	if resp.StatusCode != 200 || !strings.Contains(list, `data-thread="`+thread+`"`) || !strings.Contains(list, "stream 5 1ms before the restart") {
		t.Fatalf("the list after a restart: %d\n%s", resp.StatusCode, list)
	}
	resp, page := alice.get(base + "/t/discord/" + thread)
	if resp.StatusCode != 200 || !strings.Contains(page, "stream 5 1ms before the restart") || !strings.Contains(page, "chunk 5") {
		t.Fatalf("the thread's page after a restart: %d\n%s", resp.StatusCode, page)
	}
	// The turn the shutdown ended says how, as the chat does.
	bob, _, _ := webSignIn(ctx, t, w, hang, brokertest.Bob)
	if _, list := bob.get(base + "/threads"); !strings.Contains(list, `data-thread="`+hang+`"`) || strings.Contains(list, `data-state="running"`) {
		t.Errorf("the list after a restart, of the turn a shutdown ended:\n%s", list)
	}
	if _, page := bob.get(base + "/t/discord/" + hang); !strings.Contains(page, "working…") || !strings.Contains(page, "stopped: broker shutting down") {
		t.Errorf("the page after a restart, of the turn a shutdown ended:\n%s", page)
	}
}
