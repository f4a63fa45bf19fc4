package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/broker"
	"acpbroker/internal/brokersock"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// auditCmd runs `broker audit` with args and returns its exit status and
// output.
func auditCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"audit"}, args...), nil, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

// `broker audit` prints the decisions kept in the configuration's
// state.dir, oldest first, as a table or as JSON lines, filtered by age
// and thread; an agent's title cannot forge a line.
func TestAudit_PrintsTheDecisionsKept(t *testing.T) {
	config := writeConfig(t, "")
	s, err := store.Open(store.Options{Dir: filepath.Join(filepath.Dir(config), "state")})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for _, d := range []adapter.Decision{
		{Time: now.Add(-48 * time.Hour), Thread: "111", Tool: "Read old.go", ToolKind: "read", OptionID: "allow", OptionKind: "allow_once", Via: adapter.ViaRule, By: "rule 1", ByName: "kind read"},
		{Time: now.Add(-time.Hour), Thread: "111", Profile: "claude", Tool: "Run make\n2026-01-01 forged line", ToolKind: "execute", OptionID: "reject", OptionKind: "reject_once", Via: adapter.ViaUser, By: "201", ByName: "alice"},
		{Time: now.Add(-time.Minute), Thread: "222", Tool: "Edit main.go", ToolKind: "edit", Via: adapter.ViaTimeout, By: adapter.ViaTimeout},
		{Time: now.Add(-72 * time.Hour), Thread: "discord:333", Tool: "Read new.go", ToolKind: "read", Via: adapter.ViaMode, By: "turn.permission_mode"},
	} {
		s.Decided(broker.StoreDecision(d))
	}
	s.Close()

	code, out, errOut := auditCmd(t, "--config", config)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("want a header and 4 lines:\n%s", out)
	}
	for i, want := range [][]string{
		{now.Add(-48 * time.Hour).Format(time.RFC3339), "111", "Read old.go", "read", "allowed", "allow (allow_once)", "rule 1 (kind read)"},
		{"111", "claude", "Run make 2026-01-01 forged line", "execute", "rejected", "reject (reject_once)", "201 (alice)"},
		{"222", "Edit main.go", "edit", "cancelled", "timeout"},
		{"discord:333", "Read new.go"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("line %d lacks %q: %s", i+1, w, lines[i+1])
			}
		}
	}

	code, out, _ = auditCmd(t, "--config", config, "--since", "24h", "--thread", "111")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "201 (alice)") {
		t.Fatalf("--since 24h --thread 111: exit %d:\n%s", code, out)
	}
	// A thread is named as the trail names it, or by its platform's own
	// id alone.
	for _, id := range []string{"discord:333", "333"} {
		code, out, _ = auditCmd(t, "--config", config, "--thread", id)
		if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, "Read new.go") {
			t.Fatalf("--thread %s: exit %d:\n%s", id, code, out)
		}
	}
	if code, out, _ = auditCmd(t, "--config", config, "--thread", "console:333"); code != 0 || strings.Contains(out, "Read new.go") {
		t.Fatalf("--thread console:333: exit %d:\n%s", code, out)
	}

	code, out, _ = auditCmd(t, "--json", "--config", config, "--since", "24h")
	if code != 0 {
		t.Fatalf("--json: exit %d", code)
	}
	var got []store.Decision
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var d store.Decision
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		got = append(got, d)
	}
	if len(got) != 2 || got[0].By != "201" || got[0].ByName != "alice" || got[0].Outcome != "rejected" || !got[0].Time.Equal(now.Add(-time.Hour)) ||
		got[1].Via != "timeout" || got[1].Outcome != "cancelled" || got[1].Thread != "222" {
		t.Fatalf("--json gave %+v", got)
	}

	if code, _, errOut := auditCmd(t, "--config", config, "--since", "yesterday"); code != 2 || !strings.Contains(errOut, "since") {
		t.Fatalf("a bad --since: exit %d, %q", code, errOut)
	}
}

// A permission answered at the console is logged and counted while the
// broker runs, and `broker audit` shows it then, through the socket the
// running broker serves in state.dir (the database is locked), with the
// same flags and output as from the file once the broker has stopped.
func TestAudit_AConsoleAnswerIsRecorded(t *testing.T) {
	port := freePort(t)
	config := writeConfig(t, "")
	b := startBroker(t, config, fmt.Sprintf("BROKER_HTTP_LISTEN=127.0.0.1:%d", port), "BROKER_LOG_LEVEL=info")
	b.say(t, "permission")
	b.out.waitFor(t, "Type a number to choose.", 20*time.Second)
	b.say(t, "1")
	b.out.waitFor(t, "permission granted: allow", 20*time.Second)
	b.out.waitFor(t, "✅ done in", 20*time.Second)
	if logs := b.err.String(); !strings.Contains(logs, `"message":"permission decided"`) || !strings.Contains(logs, `"via":"user"`) {
		t.Errorf("the decision is not logged:\n%s", logs)
	}
	if _, m := get(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); !strings.Contains(m, `acp_broker_permission_decisions_total{by="user",outcome="allowed"} 1`+"\n") {
		t.Errorf("/metrics does not count the decision:\n%s", m)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		code, out, errOut := auditCmd(t, "--json", "--config", config)
		var d store.Decision
		if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("audit %s: exit %d, %q, %q", when, code, out, errOut)
		}
		if d.Thread != "console:console" || d.Tool != "Run rm -rf build" || d.OptionID != "allow" || d.OptionKind != "allow_once" || d.Via != "user" ||
			d.By != me.Username || d.ByName != "local user" || d.Turn == 0 {
			t.Fatalf("audit %s: recorded %+v", when, d)
		}
		code, out, errOut = auditCmd(t, "--config", config, "--since", "1h", "--thread", "console")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.Contains(lines[1], "Run rm -rf build") ||
			!strings.Contains(lines[1], me.Username+" (local user)") {
			t.Fatalf("audit %s as a table: exit %d, %q, %q", when, code, out, errOut)
		}
		code, out, errOut = auditCmd(t, "--config", config, "--thread", "elsewhere")
		if code != 0 || out != "No permission decisions recorded.\n" {
			t.Fatalf("audit %s of another thread: exit %d, %q, %q", when, code, out, errOut)
		}
	}
	check("while the broker runs")
	sock := filepath.Join(filepath.Dir(config), "state", brokersock.SocketName)
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the broker socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	if code := b.exit(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the broker socket outlived the broker: %v", err)
	}
	check("after the broker stopped")
}

// With the state file locked and no broker answering on the socket,
// `broker audit` says both, and where else the decisions are.
func TestAudit_LockedWithoutASocketSaysSo(t *testing.T) {
	config := writeConfig(t, "")
	st, err := store.Open(store.Options{Dir: filepath.Join(filepath.Dir(config), "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	code, _, errOut := auditCmd(t, "--config", config)
	if code != 1 || !strings.Contains(errOut, "is in use by another broker process") || !strings.Contains(errOut, "no broker answers on its socket") ||
		!strings.Contains(errOut, `"permission decided"`) {
		t.Fatalf("exit %d, %q", code, errOut)
	}
}

// A peer of the broker's own user in another user namespace, as a
// sandboxed agent is, is refused even when it reaches the socket, for the
// audit trail and for the status; the same client outside it is served.
func TestSocket_RefusesAPeerInAnotherUserNamespace(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	bin := brokerBin(t)
	config := writeConfig(t, "")
	dir := filepath.Join(filepath.Dir(config), "state")
	st, err := store.Open(store.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Decided(store.Decision{Time: time.Now().UTC(), Thread: "42", Tool: "Run make", Outcome: "allowed", Via: "rule", By: "rule 1"})
	s, err := brokersock.Serve(dir, brokersock.Answers{Decisions: st.Decisions, Status: func() any { return broker.Status{Version: "v-test", PID: 42} }}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ask := func(command string, sandboxed bool) (string, error) {
		args := []string{bin, command, "--config", config}
		if sandboxed {
			args = append([]string{"bwrap", "--unshare-user", "--dev-bind", "/", "/", "--"}, args...)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for command, shown := range map[string]string{"audit": "Run make", "status": "Broker v-test, pid 42"} {
		if out, err := ask(command, false); err != nil || !strings.Contains(out, shown) {
			t.Fatalf("broker %s outside a user namespace: %v, %s", command, err, out)
		}
		out, err := ask(command, true)
		if err == nil || strings.Contains(out, shown) || !strings.Contains(out, "refused: the broker answers no one in a sandbox") {
			t.Fatalf("broker %s from another user namespace: %v, %s", command, err, out)
		}
	}
}
