package faults

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"
)

// linked is the thread a message names with <#id>.
var linked = regexp.MustCompile(`<#(\d+)>`)

// answer posts text in thread as u and returns the answer's text, the
// n-th of the thread.
func (w *world) answer(thread string, u fakediscord.User, text string, n int) string {
	w.t.Helper()
	w.Discord.Post(thread, u, text)
	return w.awaitAnswers(thread, n)[n-1].Text
}

// With an agent that lists, resumes, closes and forks sessions: /sessions
// lists what the agent lists of this thread's workspace; /resume, by
// who may act on the thread, takes one up with session/resume and the
// thread's turns go on in it; /fork opens a new thread with an agent of
// its own whose session is forked from this one's, in a copy of the
// workspace, with this thread's usage; the thread forked from goes on
// apart.
func TestSessions_ListResumeAndForkWhereTheAgentOffersThem(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"-list-sessions", "-resume-session", "-close-session", "-fork-session"}}})
	w.start()
	thread := w.mention(alice, "title First steps")
	w.awaitAnswers(thread, 1)
	first := w.sessionOf(thread, alice)
	w.answer(thread, alice, "sh echo from the parent > notes.txt", 2)
	w.answer(thread, alice, "usage", 3)
	w.slash(thread, alice, "reset")
	w.answer(thread, alice, "stream 1", 4)
	second := w.sessionOf(thread, alice)

	list := w.deferred(thread, bob, "sessions", nil, "Continue one here")
	if !strings.Contains(list, "as it lists them") || !strings.Contains(list, "`"+first+"` **First steps**") || !strings.Contains(list, "`"+second+"` **(no title)**") || !strings.Contains(list, "this thread's now") {
		t.Fatalf("/sessions answered %q", list)
	}
	r := w.response(w.Srv.SlashCommand(thread, bob.ID, "resume", map[string]any{"session": first}))
	if !r.Ephemeral() || !strings.Contains(r.Content, "<@"+alice.ID+"> or an approver can /resume this thread; you can't") {
		t.Fatalf("bob's /resume answered %+v", r)
	}
	if got := w.deferred(thread, alice, "resume", map[string]any{"session": "sess-elsewhere"}, "sessions"); !strings.Contains(got, "The agent has no session `sess-elsewhere` here") {
		t.Fatalf("/resume of a session not listed answered %q", got)
	}
	got := w.deferred(thread, alice, "resume", map[string]any{"session": first}, "resumed")
	if want := "🔁 <@" + alice.ID + "> resumed session `" + first + "` “First steps” in this thread (session/resume)"; !strings.Contains(got, want) {
		t.Fatalf("/resume answered %q, want %q", got, want)
	}
	if got := w.answer(thread, alice, "session", 5); !strings.HasPrefix(got, "session "+first+" (resumed); 3 earlier prompts; last: usage") {
		t.Fatalf("after /resume the thread's turn says %q", got)
	}
	w.answer(thread, alice, "usage", 6)
	if st := w.slash(thread, alice, "status"); !strings.Contains(st.Content, "**Context**: 45k/200k tokens") {
		t.Errorf("the resumed session's usage is not shown: %q", st.Content)
	}

	if r := w.response(w.Srv.SlashCommand(thread, bob.ID, "fork", nil)); !r.Ephemeral() || !strings.Contains(r.Content, "can /fork this thread; you can't") {
		t.Fatalf("bob's /fork answered %+v", r)
	}
	got = w.deferred(thread, alice, "fork", nil, "forked this conversation into")
	m := linked.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("/fork answered %q, naming no thread", got)
	}
	child := m[1]
	if ch, ok := w.Srv.Channel(child); !ok || !ch.IsThread() || ch.ParentID != w.Channel {
		t.Fatalf("the fork %s is no thread of the channel: %+v", child, ch)
	}
	w.Srv.Await("the fork named after its session's title", func() bool {
		ch, _ := w.Srv.Channel(child)
		return ch.Name == "First steps"
	})
	greeting := w.awaitBotText(child, "🍴 Forked from <#"+thread+">")
	if !strings.Contains(greeting.Content, "which starts from `"+first+"`") {
		t.Errorf("the fork's greeting: %q", greeting.Content)
	}
	forked := w.sessionOf(child, alice)
	// The greeting, which ends no turn, is counted with the answer after
	// it.
	if got := w.answer(child, alice, "session", 1); !strings.Contains(got, "\nsession "+forked+" (forked from "+first+"); 5 earlier prompts; last: usage") {
		t.Fatalf("the fork's first turn says %q", got)
	}
	if got := w.answer(child, alice, "sh cat notes.txt", 2); !strings.Contains(got, "from the parent") {
		t.Errorf("the fork's workspace is no copy of the parent's: %q", got)
	}
	if st := w.slash(child, alice, "status"); !strings.Contains(st.Content, "**Context**: 45k/200k tokens") {
		t.Errorf("the fork's /status does not carry the parent's usage: %q", st.Content)
	}
	if parentPID, childPID := w.agentPID(thread, alice), w.agentPID(child, alice); parentPID == 0 || parentPID == childPID {
		t.Errorf("the fork runs on agent %d, the parent on %d: want one each", childPID, parentPID)
	}
	if got := w.answer(thread, alice, "session", 7); !strings.HasPrefix(got, "session "+first+" (resumed); 5 earlier prompts; last: usage") {
		t.Errorf("the parent after the fork says %q", got)
	}
}

// With an agent that offers none of them, /sessions lists the broker's
// own records, with the titles the agent gave; /resume says the agent
// can neither resume nor load; /fork says plainly that session/fork is
// not offered, and opens no thread.
func TestSessions_WithoutTheCapabilitiesEachIsRefusedPlainly(t *testing.T) {
	w := newWorld(t, setup{})
	w.start()
	thread := w.mention(alice, "title Early work")
	w.awaitAnswers(thread, 1)
	first := w.sessionOf(thread, alice)
	w.slash(thread, alice, "reset")
	w.answer(thread, alice, "stream 1", 2)

	list := w.deferred(thread, alice, "sessions", nil, "Continue one here")
	if !strings.Contains(list, "as the broker recorded them (the agent does not list its sessions)") || !strings.Contains(list, "`"+first+"` **Early work**") {
		t.Fatalf("/sessions answered %q", list)
	}
	if got := w.deferred(thread, alice, "resume", map[string]any{"session": first}, "session"); !strings.Contains(got, "can neither resume (session/resume) nor load (session/load) a session") {
		t.Fatalf("/resume answered %q", got)
	}
	threads := len(w.Srv.Threads())
	if got := w.deferred(thread, alice, "fork", nil, "fork"); !strings.Contains(got, "does not offer session/fork, which is still marked unstable in ACP") {
		t.Fatalf("/fork answered %q", got)
	}
	if n := len(w.Srv.Threads()); n != threads {
		t.Errorf("a refused /fork opened a thread: %d threads, were %d", n, threads)
	}
}

// With an agent that loads sessions but does not resume them, /resume
// takes the session up with session/load.
func TestSessions_ResumeLoadsWhereTheAgentCannotResume(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"-load-session"}}})
	w.start()
	thread := w.mention(alice, "stream 1")
	w.awaitAnswers(thread, 1)
	first := w.sessionOf(thread, alice)
	w.slash(thread, alice, "reset")
	w.answer(thread, alice, "stream 2", 2)
	got := w.deferred(thread, alice, "resume", map[string]any{"session": first}, "resumed")
	if !strings.Contains(got, "in this thread (session/load)") {
		t.Fatalf("/resume answered %q", got)
	}
	if got := w.answer(thread, alice, "session", 3); !strings.HasPrefix(got, "session "+first+" (loaded); 1 earlier prompts; last: stream 1") {
		t.Fatalf("after /resume the turn says %q", got)
	}
}

// An agent stopped for idleness that offers session/close closes its
// session first; the thread's next message gets a new agent that takes
// the session up with session/resume, and says nothing of a new session.
func TestSessions_IdleStopClosesTheSessionAndTheNextMessageResumesIt(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"pool.idle_timeout": "1s", "agent.args": []string{"-close-session", "-resume-session"}}})
	b := w.start()
	thread := w.mention(alice, "stream 1")
	w.awaitAnswers(thread, 1)
	pid, sid := w.agentPID(thread, alice), w.sessionOf(thread, alice)
	if !agenttest.WaitGone(pid, 15*time.Second) {
		t.Fatalf("the idle agent (pid %d) still runs", pid)
	}
	closed, err := os.ReadFile(filepath.Join(w.Work, thread, ".fakeagent", "closed"))
	if err != nil || strings.TrimSpace(string(closed)) != sid {
		t.Fatalf("the idle agent closed %q (%v) before it stopped, want %s", closed, err, sid)
	}
	b.awaitMetric(`acp_broker_agent_sessions_closed_total`, func(v float64) bool { return v == 1 })
	got := w.answer(thread, alice, "session", 2)
	if _, fresh := freshSession(got); fresh || !strings.HasPrefix(got, "session "+sid+" (resumed); 1 earlier prompts; last: stream 1") {
		t.Fatalf("the next message got %q, want the session resumed", got)
	}
}

// A thread of a worktree profile forks into a new worktree on a branch
// of its own, which starts where the parent's branch is: the parent's
// commits are there, what it left uncommitted is not.
func TestSessions_AWorktreeThreadForksIntoAWorktreeFromItsBranch(t *testing.T) {
	w := newWorld(t, setup{})
	if os.Getuid() == 0 {
		w.BrokerUser = &syscall.Credential{Uid: agenttest.Nobody, Gid: agenttest.Nobody}
	}
	repo := newRepo(t, filepath.Join(w.Dir, "repo"))
	// The agent keeps its sessions in a directory of its own, as real
	// agents keep theirs in their home: the fork's worktree does not
	// carry them.
	sessions := filepath.Join(w.Dir, "sessions")
	if err := os.Mkdir(sessions, 0o777); err != nil {
		t.Fatal(err)
	}
	w.Conf = w.Conf.With(settings{"agent.workspace": "worktree", "agent.repo": repo, "agent.base": "main",
		"agent.args": []string{"-fork-session", "-sessions-dir", sessions}, "agent.sandbox_rw": []string{sessions}})
	w.start()
	thread := w.mention(alice, "sh echo committed > kept.txt && git add kept.txt && git -c user.name=a -c user.email=a@example.com commit -q -m kept && echo draft > draft.txt")
	if a := w.awaitAnswers(thread, 1)[0]; !strings.Contains(a.Text, "exit: <nil>") {
		t.Fatalf("the parent's commit: %q", a.Text)
	}
	got := w.deferred(thread, alice, "fork", nil, "forked this conversation into")
	m := linked.FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("/fork answered %q", got)
	}
	child := m[1]
	if got := w.answer(child, alice, "sh git rev-parse --abbrev-ref HEAD; cat kept.txt; ls", 1); !strings.Contains(got, "acp/"+child) || !strings.Contains(got, "committed") || strings.Contains(got, "draft.txt") {
		t.Fatalf("the fork's worktree shows %q, want its own branch with the parent's commit and not its draft", got)
	}
}

// agent.fork_max_size bounds the copy of a thread's directory for a
// fork: past it the fork is refused, saying how much there is, and the
// new thread gets no agent.
func TestSessions_AForkCopiesNoMoreThanForkMaxSize(t *testing.T) {
	w := newWorld(t, setup{conf: settings{"agent.args": []string{"-fork-session"}, "agent.fork_max_size": "64KiB"}})
	w.start()
	thread := w.mention(alice, "sh head -c 100000 /dev/zero > big")
	if a := w.awaitAnswers(thread, 1)[0]; !strings.Contains(a.Text, "exit: <nil>") {
		t.Fatalf("the parent's file: %q", a.Text)
	}
	got := w.deferred(thread, alice, "fork", nil, "too big")
	if !strings.Contains(got, "This thread's workspace is too big to copy for a fork:") || !strings.Contains(got, "more than the 64.0 KiB") {
		t.Fatalf("/fork past the bound answered %q", got)
	}
}
