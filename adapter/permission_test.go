package adapter

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/policy"
	"acpbroker/pool"
	"acpbroker/store"
)

// audit is an Auditor that keeps the decisions.
type audit struct {
	mu   sync.Mutex
	list []Decision
	more chan struct{}
}

func newAudit() *audit { return &audit{more: make(chan struct{}, 100)} }

func (a *audit) Decided(d Decision) {
	a.mu.Lock()
	a.list = append(a.list, d)
	a.mu.Unlock()
	a.more <- struct{}{}
}

// next waits for the next decision.
func (a *audit) next(t *testing.T) Decision {
	t.Helper()
	select {
	case <-a.more:
	case <-time.After(10 * time.Second):
		t.Fatal("no permission decision recorded within 10s")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.list[len(a.list)-1]
}

func mustRules(t *testing.T, tables ...map[string]any) []policy.Rule {
	t.Helper()
	rules, errs := policy.Parse(tables, "agent.permissions")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return rules
}

// Rules decide by kind and by title, first match first: allow answers
// with the agent's allow_once and deny with its reject_once (never an
// *_always option), the thread is told which rule decided, and the
// decision is recorded with the rule; a request no rule matches is asked.
func TestPermission_RulesDecideByKindAndTitle(t *testing.T) {
	rules := mustRules(t,
		map[string]any{"title": "rm -rf", "action": "deny"},
		map[string]any{"kind": []any{"read", "search"}, "action": "allow"},
		map[string]any{"kind": "execute", "title": "^Run go ", "action": "allow"},
		map[string]any{"kind": "execute", "action": "ask"},
	)
	a := newAudit()
	r := newRig(t, nil, pool.Config{}, Config{Rules: rules, Auditor: a})
	cases := []struct {
		prompt, chose string
		notice        Notice
		by, byName    string
	}{
		{"permission-for read - Read file.go", "chose allow_once", PermissionDecided{"Read file.go", policy.Allow, Decider{N: 2, Rule: rules[1]}}, "rule 2", "kind read or search"},
		{"permission-for search allow_always,allow_once,reject_once Find *.go", "chose allow_once", PermissionDecided{"Find *.go", policy.Allow, Decider{N: 2, Rule: rules[1]}}, "rule 2", "kind read or search"},
		{"permission-for read - Read x; rm -rf /", "chose reject_once", PermissionDecided{"Read x; rm -rf /", policy.Deny, Decider{N: 1, Rule: rules[0]}}, "rule 1", `title "rm -rf"`},
		{"permission-for execute - Run go test ./...", "chose allow_once", PermissionDecided{"Run go test ./...", policy.Allow, Decider{N: 3, Rule: rules[2]}}, "rule 3", `kind execute, title "^Run go "`},
	}
	for _, c := range cases {
		rec := r.prompt("t", c.prompt)
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, c.chose) {
			t.Fatalf("%q: outcome %+v, want %q", c.prompt, o, c.chose)
		}
		if n := rec.noticeList(); len(n) != 1 || !reflect.DeepEqual(n[0], c.notice) {
			t.Fatalf("%q: the thread was told %+v, want %+v", c.prompt, n, c.notice)
		}
		d := a.next(t)
		want := strings.TrimPrefix(c.chose, "chose ")
		if d.Via != ViaRule || d.By != c.by || d.ByName != c.byName || d.OptionID != want || d.OptionKind != want || d.Thread != "t" {
			t.Fatalf("%q: recorded %+v", c.prompt, d)
		}
		select {
		case <-rec.asked:
			t.Fatalf("%q was put to a person", c.prompt)
		default:
		}
	}

	for _, p := range []string{"permission-for execute - Run make", "permission-for edit - Edit main.go"} {
		rec := newRecorder()
		rec.answer = func(ctx context.Context, req *acp.PermissionRequest) Answer {
			return Answer{Outcome: acp.PermissionOutcome{OptionID: "reject_always"}, By: "u7", ByName: "carol"}
		}
		r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock(p)}, Sink: rec})
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, "chose reject_always") || len(rec.asked) != 1 || len(rec.noticeList()) != 0 {
			t.Fatalf("%q: outcome %+v, notices %+v; want it asked and answered by the person", p, o, rec.noticeList())
		}
		d := a.next(t)
		if d.Via != ViaUser || d.By != "u7" || d.ByName != "carol" || d.OptionKind != acp.OptionRejectAlways || d.Outcome() != "rejected" || d.Profile != pool.DefaultProfileName {
			t.Fatalf("%q: recorded %+v", p, d)
		}
	}
	st := r.engine.Stats().Permissions
	if st[DecisionClass{"allowed", ViaRule}] != 3 || st[DecisionClass{"rejected", ViaRule}] != 1 || st[DecisionClass{"rejected", ViaUser}] != 2 {
		t.Fatalf("counted %v", st)
	}
}

// An automatic answer takes only a once-option: an agent without
// allow_once (or reject_once) gets "cancelled", never the *_always
// option, and the thread is told why.
func TestPermission_AutomaticAnswerWithoutAOnceOptionIsCancelled(t *testing.T) {
	a := newAudit()
	rules := mustRules(t, map[string]any{"kind": "read", "action": "allow"})
	r := newRig(t, nil, pool.Config{}, Config{Rules: rules, PermissionMode: PermissionDeny, Auditor: a})
	mode := Decider{Setting: "turn.permission_mode", Mode: PermissionDeny}
	cases := []struct {
		prompt, chose string
		notice        Notice
	}{
		{"permission-for read allow_always,reject_once Read a", "chose nothing",
			PermissionNoOption{"Read a", policy.Allow, Decider{N: 1, Rule: rules[0]}, acp.OptionAllowOnce}},
		{"permission-for edit allow_once,reject_always Edit a", "chose nothing",
			PermissionNoOption{"Edit a", policy.Deny, mode, acp.OptionRejectOnce}},
		{"permission-for edit allow_once,reject_once_for_now,reject_always Edit b", "chose reject_once_for_now",
			PermissionDecided{"Edit b", policy.Deny, mode}},
	}
	for _, c := range cases {
		rec := r.prompt("t", c.prompt)
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, c.chose) {
			t.Fatalf("%q: outcome %+v, want %q", c.prompt, o, c.chose)
		}
		if n := rec.noticeList(); len(n) != 1 || !reflect.DeepEqual(n[0], c.notice) {
			t.Fatalf("%q: the thread was told %+v, want %+v", c.prompt, n, c.notice)
		}
		d := a.next(t)
		if want := strings.TrimPrefix(c.chose, "chose "); want != "nothing" && d.OptionID != want || want == "nothing" && d.Outcome() != "cancelled" {
			t.Fatalf("%q: recorded %+v", c.prompt, d)
		}
	}
}

// turn.permission_mode = allow is the last rule: what the rules do not
// decide, it allows; what they deny stays denied.
func TestPermission_ModeActsAfterTheRules(t *testing.T) {
	a := newAudit()
	r := newRig(t, nil, pool.Config{}, Config{Rules: mustRules(t, map[string]any{"kind": "delete", "action": "deny"}), PermissionMode: PermissionAllow, Auditor: a})
	o := r.prompt("t", "permission-for delete - Delete a").wait(t, 20*time.Second)
	if !strings.Contains(o.Text, "chose reject_once") {
		t.Fatalf("delete: %+v", o)
	}
	if d := a.next(t); d.Via != ViaRule || d.By != "rule 1" {
		t.Fatalf("delete recorded %+v", d)
	}
	o = r.prompt("t", "permission-for edit - Edit a").wait(t, 20*time.Second)
	if !strings.Contains(o.Text, "chose allow_once") {
		t.Fatalf("edit: %+v", o)
	}
	if d := a.next(t); d.Via != ViaMode || d.By != "turn.permission_mode" || d.ByName != "allow" {
		t.Fatalf("edit recorded %+v", d)
	}

	// A prompt's own rules replace the engine's.
	rec := newRecorder()
	r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("permission-for delete - Delete b")}, Sink: rec,
		Rules: mustRules(t, map[string]any{"title": "^Delete b$", "action": "allow"})})
	if o := rec.wait(t, 20*time.Second); !strings.Contains(o.Text, "chose allow_once") {
		t.Fatalf("with the prompt's rules: %+v", o)
	}
	if d := a.next(t); d.By != "rule 1" || d.ByName != `title "^Delete b$"` {
		t.Fatalf("with the prompt's rules, recorded %+v", d)
	}
}

// A request that leaves out its tool call's kind is matched with the
// kind the agent gave the tool call before, when the turn has seen it;
// one never given matches only rules without kind.
func TestPermission_AKindNeverGivenMatchesOnlyRulesWithoutKind(t *testing.T) {
	a := newAudit()
	r := newRig(t, nil, pool.Config{}, Config{Rules: mustRules(t,
		map[string]any{"kind": "other", "action": "allow"},
		map[string]any{"title": "^Run ", "action": "deny"}), Auditor: a})
	o := r.prompt("t", "permission-for - - Run it").wait(t, 20*time.Second)
	if !strings.Contains(o.Text, "chose reject_once") {
		t.Fatalf("outcome %+v", o)
	}
	if d := a.next(t); d.By != "rule 2" || d.ToolKind != "" {
		t.Fatalf("recorded %+v", d)
	}
}

// A question nobody answers in time, and one open when its turn is
// cancelled, are recorded as such, with no option chosen.
func TestPermission_TimeoutAndCancelledTurnAreRecorded(t *testing.T) {
	a := newAudit()
	r := newRig(t, nil, pool.Config{}, Config{PermissionTimeout: time.Second, Auditor: a})
	rec := r.prompt("t", "permission-for execute - Run make")
	if o := rec.wait(t, 20*time.Second); !strings.Contains(o.Text, "chose nothing") {
		t.Fatalf("outcome %+v", o)
	}
	d := a.next(t)
	if d.Via != ViaTimeout || d.By != "timeout" || d.OptionID != "" || d.Outcome() != "cancelled" || d.Tool != "Run make" || d.ToolKind != "execute" {
		t.Fatalf("timed out: recorded %+v", d)
	}

	rec = r.prompt("t", "permission-for execute - Run make")
	<-rec.asked
	r.engine.Cancel("t", CancelledBy("tester"))
	if o := rec.wait(t, 20*time.Second); o.Err == nil {
		t.Fatalf("outcome %+v, want cancelled", o)
	}
	d = a.next(t)
	if d.Via != ViaCancelled || d.By != "cancelled" || d.OptionID != "" {
		t.Fatalf("cancelled turn: recorded %+v", d)
	}
	st := r.engine.Stats().Permissions
	if st[DecisionClass{"cancelled", ViaTimeout}] != 1 || st[DecisionClass{"cancelled", ViaCancelled}] != 1 {
		t.Fatalf("counted %v", st)
	}
}

// A profile's own rules decide its agents' requests, and only theirs:
// the same request is allowed for one profile, denied for another, and
// the record names the profile whose agent asked.
func TestPermission_EachProfileHasItsOwnRules(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	profs := profiles(t)
	profs["main"].Permissions = mustRules(t, map[string]any{"kind": "execute", "action": "allow"})
	profs["reviewer"].Permissions = mustRules(t, map[string]any{"kind": "execute", "action": "deny"})
	r := newProfileRig(t, profs, st)
	a := newAudit()
	r.engine.mu.Lock()
	r.engine.cfg.Auditor = a
	r.engine.mu.Unlock()
	for _, c := range []struct{ thread, agent, chose string }{
		{"m", "main", "chose allow_once"},
		{"r", "reviewer", "chose reject_once"},
	} {
		o := r.promptAgent(c.thread, c.agent, "permission-for execute - Run make").wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, c.chose) {
			t.Fatalf("%s: outcome %+v, want %q", c.agent, o, c.chose)
		}
		if d := a.next(t); d.Profile != c.agent || d.Via != ViaRule || d.By != "rule 1" {
			t.Fatalf("%s: recorded %+v", c.agent, d)
		}
	}
}

// A running agent keeps the permission rules of the profile it started
// from: changing the profile's rules, or removing the profile, while it
// runs changes nothing for it (turn.permission_mode = allow would
// otherwise let through what its rule denies); the thread's next agent
// is started with the rules configured then.
func TestPermission_ARunningAgentKeepsTheRulesItStartedWith(t *testing.T) {
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	profs := profiles(t)
	deny := mustRules(t, map[string]any{"kind": "execute", "action": "deny"})
	profs["reviewer"].Permissions = deny
	r := newProfileRig(t, profs, st)
	a := newAudit()
	r.engine.mu.Lock()
	r.engine.cfg.Auditor, r.engine.cfg.PermissionMode = a, PermissionAllow
	r.engine.mu.Unlock()

	ask := func(step, chose string, notice Notice) {
		t.Helper()
		rec := r.promptAgent("r", "reviewer", "permission-for execute - Run make")
		o := rec.wait(t, 20*time.Second)
		if o.Err != nil || !strings.Contains(o.Text, chose) {
			t.Fatalf("%s: outcome %+v, want %q", step, o, chose)
		}
		if n := rec.noticeList(); len(n) != 1 || !reflect.DeepEqual(n[0], notice) {
			t.Fatalf("%s: the thread was told %+v, want %+v", step, n, notice)
		}
		if d := a.next(t); d.Profile != "reviewer" || d.Via != ViaRule || d.By != "rule 1" {
			t.Fatalf("%s: recorded %+v", step, d)
		}
	}
	denied := PermissionDecided{"Run make", policy.Deny, Decider{N: 1, Rule: deny[0]}}
	ask("at start", "chose reject_once", denied)
	pid := r.pool.Lookup("r").Proc.PID()

	changed := profiles(t)
	changed["reviewer"].Permissions = mustRules(t, map[string]any{"kind": "execute", "action": "allow"})
	r.pool.SetProfiles(changed, "main")
	ask("after the rules changed", "chose reject_once", denied)

	r.pool.SetProfiles(map[string]*pool.Profile{"main": profiles(t)["main"]}, "main")
	ask("after the profile was removed", "chose reject_once", denied)
	if ag := r.pool.Lookup("r"); ag == nil || ag.Proc.PID() != pid {
		t.Fatalf("the thread's agent was replaced; the steps above did not test a running agent")
	}

	r.pool.SetProfiles(changed, "main")
	r.engine.Reset("r", CancelledBy("tester"))
	ask("with a new agent", "chose allow_once", PermissionDecided{"Run make", policy.Allow, Decider{N: 1, Rule: changed["reviewer"].Permissions[0]}})
	if ag := r.pool.Lookup("r"); ag == nil || ag.Proc.PID() == pid {
		t.Fatalf("the thread's agent was not replaced by the reset")
	}
}

// A prompt's own permission mode answers what no rule matches instead
// of the engine's, and is recorded by the name the prompt gives it; the
// rules still come first, and "ask" puts the request to a person even
// when the engine's mode would allow it.
func TestPermission_APromptsModeReplacesTheEngines(t *testing.T) {
	a := newAudit()
	r := newRig(t, nil, pool.Config{}, Config{Rules: mustRules(t, map[string]any{"kind": "delete", "action": "allow"}), PermissionMode: PermissionAllow, Auditor: a})
	submit := func(text, mode string) *recorder {
		rec := newRecorder()
		if err := r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock(text)}, Sink: rec,
			PermissionMode: mode, PermissionBy: "schedule nightly's permission_mode"}); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if o := submit("permission-for edit - Edit a", PermissionDeny).wait(t, 20*time.Second); !strings.Contains(o.Text, "chose reject_once") {
		t.Fatalf("deny: %+v", o)
	}
	if d := a.next(t); d.Via != ViaMode || d.By != "schedule nightly's permission_mode" || d.ByName != "deny" {
		t.Fatalf("deny recorded %+v", d)
	}
	if o := submit("permission-for delete - Delete a", PermissionDeny).wait(t, 20*time.Second); !strings.Contains(o.Text, "chose allow_once") {
		t.Fatalf("a rule before the prompt's mode: %+v", o)
	}
	a.next(t)
	rec := newRecorder()
	rec.answer = func(ctx context.Context, req *acp.PermissionRequest) Answer {
		return Answer{Outcome: acp.PermissionOutcome{OptionID: "reject_once"}, By: "201"}
	}
	if err := r.engine.Submit("t", &Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("permission-for edit - Edit b")}, Sink: rec,
		PermissionMode: PermissionAsk}); err != nil {
		t.Fatal(err)
	}
	if o := rec.wait(t, 20*time.Second); !strings.Contains(o.Text, "chose reject_once") {
		t.Fatalf("ask: %+v", o)
	}
	if d := a.next(t); d.Via != ViaUser {
		t.Fatalf("ask recorded %+v", d)
	}
}
