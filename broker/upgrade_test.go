package broker_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/internal/brokertest"
	"acpbroker/internal/fakediscord"
	"acpbroker/store"
	"acpbroker/workspace"
)

// testdata/state-before-platforms/state.db is the state a broker of
// before thread ids named their platform (commit f75da26) left when it
// was killed mid-turn, serving Discord with the fake agent
// (--load-session --config-options) and two profiles, a (the default)
// and b: alice's thread, of a, chose the model fake-large and was
// running "hang"; bob's thread, started with /new b, had a permission
// request bob allowed. ids.json names its guild, channel, threads (by
// their starters) and the message left running.
type before struct {
	Guild, Channel, Alice, Bob, Hang string
}

// A state file written before thread ids named their platform keeps
// working after an upgrade: the turn it was running is reported to its
// thread, and its threads keep their agent sessions, profiles, choices,
// starters, their agents' directories and worktrees; the audit trail
// names them as Discord's.
func TestUpgrade_AStateFileOfBeforePlatformsKeepsItsThreads(t *testing.T) {
	var ids before
	raw, err := os.ReadFile("../testdata/state-before-platforms/ids.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ids); err != nil {
		t.Fatal(err)
	}
	repo := newRepo(t)
	w := world(t, brokertest.Settings{
		"agent.args":               []string{"--load-session", "--config-options"},
		"agents.default":           "a",
		"agents.a.env":             []string{"WHO=a"},
		"agents.b.env":             []string{"WHO=b"},
		"agents.b.workspace":       "worktree",
		"agents.b.repo":            repo,
		"discord.allowed_channels": []string{ids.Channel},
	})
	// The fake Discord has the earlier broker's channel, and its threads
	// (as channels: the broker knows them from its state).
	w.Srv.AddChannel(ids.Guild, ids.Channel, "agents")
	w.Srv.AddChannel(ids.Guild, ids.Alice, "hello")
	w.Srv.AddChannel(ids.Guild, ids.Bob, "env")
	state := filepath.Join(w.Dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile("../testdata/state-before-platforms/state.db")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "state.db"), db, 0o600); err != nil {
		t.Fatal(err)
	}
	// What that broker and its agents left on disk for its threads, as
	// they left it: a's per-thread directory, where the fake agent keeps
	// the history of alice's session, and a worktree of b (made as its
	// worktree profile made them, recorded as it recorded them).
	aliceDir := filepath.Join(w.Work, ids.Alice)
	if err := os.MkdirAll(filepath.Join(aliceDir, ".fakeagent"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(aliceDir, ".fakeagent", "sess-1519-1"), []byte("hello\nsettings\nhang\n"), 0o644)
	os.WriteFile(filepath.Join(aliceDir, "alice-was-here"), nil, 0o644)
	wt := &workspace.Worktrees{Repo: repo, Base: "HEAD", Dir: filepath.Join(w.Work, "worktrees", "b")}
	bobDir, _, err := wt.Prepare(context.Background(), ids.Bob)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bobDir, "notes.txt"), []byte("bob's notes\n"), 0o644)
	old, err := store.Open(store.Options{Dir: state})
	if err != nil {
		t.Fatal(err)
	}
	old.WorktreeMade(store.Worktree{Dir: bobDir, Thread: ids.Bob, Profile: "b", Repo: repo, Root: wt.Dir})
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	b, err := w.Open(context.Background(), broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := w.Discord.AwaitBotText(ctx, ids.Alice, "restarted while working on your message “hang”", 0); err != nil {
		t.Fatalf("the turn left running is not reported to its thread: %v", err)
	}

	alice, bob := broker.ThreadID("discord", ids.Alice), broker.ThreadID("discord", ids.Bob)
	for _, bare := range []string{ids.Alice, ids.Bob} {
		if _, ok := b.Store().Thread(bare); ok {
			t.Errorf("the store still keeps thread %s by its bare id", bare)
		}
	}
	if th, ok := b.Store().Thread(alice); !ok || th.SessionID != "sess-1519-1" || th.Profile != "a" || !maps.Equal(th.Options, map[string]string{"model": "fake-large"}) ||
		!strings.Contains(string(th.Chat), `"starter":"201"`) {
		t.Fatalf("alice's thread in the store: %+v (kept: %v)", th, ok)
	}
	decisions, err := b.Store().Decisions(store.DecisionFilter{Thread: bob})
	if err != nil || len(decisions) != 1 || decisions[0].By != brokertest.Bob.ID {
		t.Fatalf("bob's thread's decisions: %+v, %v", decisions, err)
	}

	ask := func(thread string, u fakediscord.User, text string, n int) string {
		t.Helper()
		w.Discord.Post(thread, u, text)
		answers, err := w.Discord.AwaitAnswers(ctx, thread, n)
		if err != nil {
			t.Fatalf("%s in thread %s: %v", text, thread, err)
		}
		return answers[n-1].Text
	}
	if got := ask(ids.Alice, brokertest.Alice, "settings", 1); !strings.Contains(got, "model=fake-large") {
		t.Errorf("alice's thread's agent runs with %q, want the model chosen before", got)
	}
	if st := b.Engine().Status(alice); st.SessionID != "sess-1519-1" || st.Profile != "a" {
		t.Errorf("alice's thread resumed session %q of profile %q, want sess-1519-1 of a", st.SessionID, st.Profile)
	}
	if got := ask(ids.Alice, brokertest.Alice, "run /bin/ls", 2); !strings.Contains(got, "alice-was-here") {
		t.Errorf("alice's thread's agent works elsewhere than its directory: %q", got)
	}
	if got := ask(ids.Bob, brokertest.Bob, "env", 1); !strings.Contains(got, "WHO=b") {
		t.Errorf("bob's thread's agent is not of profile b: %q", got)
	}
	if got := ask(ids.Bob, brokertest.Bob, "run /bin/cat notes.txt", 2); !strings.Contains(got, "bob's notes") {
		t.Errorf("bob's thread's agent is not in its worktree: %q", got)
	}
	// bob started his thread: alice may not answer its questions.
	w.Discord.Post(ids.Bob, brokertest.Alice, "permission")
	req, err := w.Discord.PermissionRequest(ctx, ids.Bob)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Discord.Response(ctx, w.Srv.ClickButton(ids.Bob, req.ID, brokertest.Alice.ID, req.ButtonID(t, "Allow")))
	if err != nil || !strings.Contains(r.Content, "can answer this request; you can't") {
		t.Fatalf("alice's click in bob's thread: %+v, %v", r, err)
	}
	if _, err := w.Discord.Response(ctx, w.Srv.ClickButton(ids.Bob, req.ID, brokertest.Bob.ID, req.ButtonID(t, "Allow"))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, ids.Bob, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(bobDir, "notes.txt")); err != nil {
		t.Fatalf("bob's worktree is gone: %v", err)
	}
	if got := b.Store().Worktrees(); len(got) != 1 || got[0].Thread != bob || got[0].Dir != bobDir {
		t.Fatalf("worktrees recorded: %+v", got)
	}
}

// newRepo makes a git repository with one commit on main.
func newRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "first"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}
