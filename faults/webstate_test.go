package faults

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// A broker killed with SIGKILL while a turn runs: the next one's web
// front end lists the thread and its page shows the turn as far as it
// got, interrupted, never running. The page's state is written at most
// two seconds after it changes; the test waits that and a margin.
func TestRestart_AKilledTurnShowsInterruptedOnTheWeb(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"web.listen": "127.0.0.1:0"}})
	b := w.start()
	thread := w.mention(alice, "hang")
	w.awaitBotText(thread, "working…")
	time.Sleep(4 * time.Second) // past the web's save interval and the store's flush
	brokertest.MustGet(t, patience, func(ctx context.Context) (*brokertest.Broker, error) { return w.Restart(ctx, b.Broker, true) })

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, base := webPerson(ctx, t, w, alice, "127.0.0.1")
	get := func(path string) string {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	list := get("/threads")
	if !strings.Contains(list, `data-thread="`+thread+`"`) || strings.Contains(list, `data-state="running"`) {
		t.Errorf("the list after the broker was killed:\n%s", list)
	}
	page := get("/t/discord/" + thread)
	if !strings.Contains(page, "working…") || !strings.Contains(page, "interrupted: the broker stopped before this turn ended") {
		t.Errorf("the thread's page after the broker was killed:\n%s", page)
	}
}

// A broker killed while its agent waits on a permission request: after
// the restart the turn's page shows the request ended, with the turn's
// cause, and offers no answer to it, since the agent that asked is gone.
func TestRestart_AnOpenRequestShowsEndedOnTheWeb(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"web.listen": "127.0.0.1:0"}})
	b := w.start()
	thread := w.mention(alice, "permission")
	w.permissionRequest(thread)
	time.Sleep(4 * time.Second) // past the web's save interval and the store's flush
	brokertest.MustGet(t, patience, func(ctx context.Context) (*brokertest.Broker, error) { return w.Restart(ctx, b.Broker, true) })

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, base := webPerson(ctx, t, w, alice, "127.0.0.1")
	resp, err := c.Get(base + "/t/discord/" + thread)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	if !strings.Contains(page, "Not answered") || !strings.Contains(page, "Ended without an answer, with the turn: ⏹️ interrupted: the broker stopped before this turn ended") {
		t.Errorf("the page does not show the request ended:\n%s", page)
	}
	if strings.Contains(page, "data-ask=") || strings.Contains(page, "/permit") {
		t.Errorf("the page offers an answer to a request no one can answer:\n%s", page)
	}
}
