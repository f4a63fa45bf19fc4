package faults

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/agenttest"
)

var childPID = regexp.MustCompile(`child:(\d+)`)

// Stopping an agent leaves nothing behind: when the agent has started a
// child that ignores SIGTERM (and the agent itself ignores SIGTERM, with
// or without exiting when its stdin closes), /reset in the thread, or
// SIGTERM to the broker, ends both the agent and the child. /cancel alone
// is not such a stop: an agent that answers the cancel is kept, with
// whatever it runs.
func TestOrphans_ChildIgnoringSIGTERMDiesWithItsAgent(t *testing.T) {
	for _, args := range [][]string{{"--ignore-term"}, {"--ignore-term", "--no-exit-on-eof"}} {
		for _, end := range []string{"reset", "shutdown"} {
			t.Run(strings.Join(args, " ")+" "+end, func(t *testing.T) {
				// Unsandboxed: the process-group kill is what is tested
				// (sandboxed, the agent's PID namespace ends with it, and
				// the child's pid is not the host's).
				w := newWorld(t, setup{conf: settings{"agent.args": args, "agent.sandbox": "none"}})
				b := w.start()
				thread := w.mention(alice, "spawn-child")
				m := childPID.FindStringSubmatch(w.awaitBotText(thread, "child:").Content)
				child, _ := strconv.Atoi(m[1])
				agent := w.agentPID(thread, alice)
				if !agenttest.Running(child) || !agenttest.Running(agent) {
					t.Fatalf("agent %d or child %d not running before the stop", agent, child)
				}
				switch end {
				case "reset":
					r := w.slash(thread, alice, "reset")
					if !strings.Contains(r.Content, "reset the session") {
						t.Fatalf("/reset answered %+v", r)
					}
					got := w.awaitAnswers(thread, 1)[0]
					if !strings.HasPrefix(got.Footer, "-# ⏹️ cancelled by Alice (session reset)") {
						t.Errorf("the turn ended with %q", got.Footer)
					}
				case "shutdown":
					start := time.Now()
					if code := b.stop(); code != 0 {
						t.Errorf("the broker exited with status %d", code)
					}
					within(t, "the shutdown", time.Since(start), 0, 5*time.Second+3*time.Second)
					got := w.Discord.Answers(thread)
					if len(got) != 1 || !strings.HasPrefix(got[0].Footer, "-# ❌ stopped: broker shutting down") {
						t.Errorf("the thread was not told the broker stopped: %+v", got)
					}
				}
				for what, pid := range map[string]int{"agent": agent, "child": child} {
					if !agenttest.WaitGone(pid, 10*time.Second) {
						t.Errorf("the %s (pid %d) outlived the %s", what, pid, end)
					}
				}
				if end == "reset" {
					w.Discord.Post(thread, alice, "fresh start")
					got := w.awaitAnswers(thread, 2)[1]
					if !strings.Contains(got.Text, "You said: fresh start") || strings.Contains(got.Text, "(resumed)") {
						t.Errorf("the message after /reset got %q", got.Text)
					}
				}
			})
		}
	}
}
