package faults

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
)

// probeLine returns the line of an answer that reports probe what.
func probeLine(t *testing.T, text, what string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, what+" "); ok {
			return rest
		}
	}
	t.Fatalf("no result for %s in %q", what, text)
	return ""
}

// A sandboxed agent (the default) reaches its own workspace and a
// loopback model server its allow_hosts names (through the proxy), and
// nothing of the broker or of other threads:
// not the broker's environment (where the token is), not its state, its
// configuration or a secret file beside them, not another thread's
// workspace; and it cannot write into the state directory.
func TestSandbox_AnAgentSeesOnlyItsOwnThread(t *testing.T) {
	needBwrap(t)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer model.Close()
	// The token reaches the broker through its environment, where an
	// unconfined process of the same user could read it.
	w := newWorld(t, setup{conf: settings{"discord.token": nil, "agent.allow_hosts": []string{strings.TrimPrefix(model.URL, "http://")}}})
	w.Env = []string{"BROKER_DISCORD_TOKEN=" + brokertest.Token}
	secret := filepath.Join(w.Dir, "token.txt")
	os.WriteFile(secret, []byte(brokertest.Token), 0o600)
	w.start()

	other := w.mention(bob, "probe w:"+filepath.Join(w.Work, "placeholder"))
	w.awaitAnswers(other, 1)
	otherFile := filepath.Join(w.Work, other, "notes.txt")
	if err := os.WriteFile(otherFile, []byte("bob's notes"), 0o644); err != nil {
		t.Fatal(err)
	}

	own := filepath.Join(w.Work, "{thread}", "own.txt")
	probes := []string{
		"environ:" + brokertest.Token,
		"r:" + secret,
		"r:" + filepath.Join(w.Dir, "broker.toml"),
		"r:" + filepath.Join(w.Dir, "state", "state.db"),
		"w:" + filepath.Join(w.Dir, "state", "planted"),
		"r:" + otherFile,
		"proxy:" + model.URL,
	}
	thread := w.mention(alice, "probe "+strings.Join(probes, " "))
	got := w.awaitAnswers(thread, 1)[0].Text
	if r := probeLine(t, got, probes[0]); !strings.HasPrefix(r, "absent") {
		t.Errorf("the broker's environment: %s", r)
	}
	for _, p := range probes[1:6] {
		if r := probeLine(t, got, p); !strings.HasPrefix(r, "denied") {
			t.Errorf("%s: %s", p, r)
		}
	}
	if r := probeLine(t, got, probes[6]); !strings.HasPrefix(r, "ok") {
		t.Errorf("the loopback model server: %s", r)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "state", "planted")); err == nil {
		t.Error("the agent planted a file in the state directory")
	}

	ownPath := strings.ReplaceAll(own, "{thread}", thread)
	w.Discord.Post(thread, alice, "probe w:"+ownPath+" r:"+ownPath)
	got = w.awaitAnswers(thread, 2)[1].Text
	for _, p := range []string{"w:" + ownPath, "r:" + ownPath} {
		if r := probeLine(t, got, p); r != "ok" {
			t.Errorf("its own workspace, %s: %s", p, r)
		}
	}
}

// With agent.sandbox_network = false (deprecated: agent.network =
// "none") a sandboxed agent has no network at all: not the proxy, not
// the host's loopback, while its own workspace still works.
func TestSandbox_NoNetworkCutsEvenLoopback(t *testing.T) {
	needBwrap(t)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer model.Close()
	w := newWorld(t, setup{conf: settings{"agent.sandbox_network": false}})
	w.start()
	thread := w.mention(alice, "probe get:"+model.URL+" proxy:"+model.URL)
	got := w.awaitAnswers(thread, 1)[0].Text
	if r := probeLine(t, got, "get:"+model.URL); !strings.HasPrefix(r, "denied") {
		t.Errorf("the loopback server with agent.sandbox_network = false: %s", r)
	}
	if r := probeLine(t, got, "proxy:"+model.URL); !strings.HasPrefix(r, "denied: no HTTP_PROXY") {
		t.Errorf("agent.sandbox_network = false leaves a proxy: %s", r)
	}
	own := "w:" + filepath.Join(w.Work, thread, "own.txt")
	w.Discord.Post(thread, alice, "probe "+own)
	if r := probeLine(t, w.awaitAnswers(thread, 2)[1].Text, own); r != "ok" {
		t.Errorf("its own workspace without a network: %s", r)
	}
}
