package faults

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"acpbroker/internal/brokertest"
)

// A profile's permission rules decide by kind and by title, first match
// first, through a real broker on the fake Discord: a read is allowed by
// rule 1, a command with rm -rf denied by rule 2, other commands asked
// by rule 3 even though turn.permission_mode = "allow" (which answers
// the edit no rule matches). The thread says which rule decided. A user
// who neither started the thread nor approves cannot answer; the
// starter's click does; an unanswered request times out. `broker audit`,
// run while the broker runs, shows each decision with who decided.
func TestRules_DecideByKindAndTitleAndAuditSaysWhoDecided(t *testing.T) {
	w := newWorld(t, setup{conf: settings{
		"turn.permission_mode":    "allow",
		"turn.permission_timeout": "2s",
		"agents.default":          "rev",
		"agents.rev.env":          []string{"WHO=rev"},
	}})
	w.Raw = `
[[agents.rev.permissions]]
kind = "read"
action = "allow"

[[agents.rev.permissions]]
title = 'rm -rf'
action = "deny"

[[agents.rev.permissions]]
kind = "execute"
action = "ask"
`
	w.start()
	thread := w.mention(alice, "permission-for read - Read main.go")
	steps := []struct{ prompt, notice, chose string }{
		{"", "Allowed “Read main.go” by rule 1 (kind read).", "chose allow_once"},
		{"permission-for execute - Run rm -rf /", "Denied “Run rm -rf /” by rule 2 (title \"rm -rf\").", "chose reject_once"},
		{"permission-for edit - Edit main.go", "Allowed “Edit main.go” by turn.permission_mode = allow.", "chose allow_once"},
	}
	for i, s := range steps {
		if s.prompt != "" {
			w.Discord.Post(thread, alice, s.prompt)
		}
		got := w.awaitAnswers(thread, i+1)[i].Text
		if !strings.Contains(got, s.notice) || !strings.Contains(got, s.chose) {
			t.Fatalf("step %d: the thread shows %q; want %q and %q", i+1, got, s.notice, s.chose)
		}
	}
	for _, m := range w.Srv.Messages(thread) {
		if strings.HasPrefix(m.Content, brokertest.PermissionPrefix) {
			t.Fatalf("a request a rule decided was put to people: %q", m.Content)
		}
	}

	w.Discord.Post(thread, alice, "permission-for execute - Run make")
	req := w.permissionRequest(thread)
	r := w.response(w.Srv.ClickButton(thread, req.ID, bob.ID, req.ButtonID(t, "allow_once")))
	if !r.Ephemeral() || !strings.Contains(r.Content, "can answer this request; you can't") {
		t.Fatalf("bob's click answered %+v", r)
	}
	w.response(w.Srv.ClickButton(thread, req.ID, alice.ID, req.ButtonID(t, "reject_once")))
	if got := w.awaitAnswers(thread, 4)[3].Text; !strings.Contains(got, "chose reject_once") {
		t.Fatalf("the asked request: %q", got)
	}
	w.Discord.Post(thread, alice, "permission-for execute - Run make test")
	w.permissionRequest(thread, req.ID)
	if got := w.awaitAnswers(thread, 5)[4].Text; !strings.Contains(got, `Permission for "Run make test" was not answered within 2s; answered cancelled.`) {
		t.Fatalf("the unanswered request: %q", got)
	}

	config := w.writeConfig()
	out, err := exec.Command(bins.Broker, "audit", "--config", config, "--thread", thread).CombinedOutput()
	if err != nil {
		t.Fatalf("broker audit while the broker runs: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := [][]string{
		{"Read main.go", "read", "allowed", "allow_once (allow_once)", "rule 1 (kind read)"},
		{"Run rm -rf /", "execute", "rejected", "reject_once (reject_once)", `rule 2 (title "rm -rf")`},
		{"Edit main.go", "edit", "allowed", "allow_once (allow_once)", "turn.permission_mode (allow)"},
		{"Run make", "execute", "rejected", "reject_once (reject_once)", alice.ID + " (" + alice.Username + ")"},
		{"Run make test", "execute", "cancelled", "timeout"},
	}
	if len(lines) != len(want)+1 {
		t.Fatalf("broker audit printed %d lines, want a header and %d:\n%s", len(lines), len(want), out)
	}
	for i, cells := range want {
		for _, c := range cells {
			if !strings.Contains(lines[i+1], c) || !strings.Contains(lines[i+1], thread) || !strings.Contains(lines[i+1], "rev") {
				t.Errorf("audit line %d lacks %q (or the thread or profile): %s", i+1, c, lines[i+1])
			}
		}
	}

	out, err = exec.Command(bins.Broker, "audit", "--json", "--since", "1h", "--config", config).Output()
	if err != nil {
		t.Fatalf("broker audit --json: %v", err)
	}
	var vias []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d struct{ Via, By, Profile string }
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		vias = append(vias, d.Via+":"+d.By)
	}
	if got := strings.Join(vias, " "); got != "rule:rule 1 rule:rule 2 mode:turn.permission_mode user:"+alice.ID+" timeout:timeout" {
		t.Fatalf("broker audit --json: who decided: %s", got)
	}
}
