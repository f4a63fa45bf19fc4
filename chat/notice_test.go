package chat

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/netproxy"
	"acpbroker/policy"
)

// Each of the engine's notices is said in one sentence with its facts:
// which tool or question, what decided and how, how long was waited,
// what was refused and why.
func TestNoticeText_SaysEachNoticeWithItsFacts(t *testing.T) {
	r, errs := policy.Parse([]any{
		map[string]any{"title": "rm -rf", "action": "deny"}, map[string]any{"kind": []any{"read", "search"}, "action": "allow"},
		map[string]any{"kind": "execute", "title": "^Run go ", "action": "allow"}, map[string]any{"kind": "read", "action": "allow"},
	}, "agent.permissions")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	said, kinds := map[string]bool{}, map[string]bool{}
	engine := adapter.Decider{Setting: "turn.permission_mode", Mode: adapter.PermissionDeny}
	for _, c := range []struct {
		n    adapter.Notice
		want string
	}{
		{adapter.SessionLost{Session: "s1"},
			"The agent could not resume this thread's earlier conversation, so this is a new session: it does not remember what was said before."},
		{adapter.HostLost{From: "gpu-1", To: "gpu-2"},
			"This thread's agent now runs on agent host gpu-2, in a fresh workspace: the files of its earlier one stayed on gpu-1, which is lost to it."},
		{adapter.ImagesLeftOut{Count: 2}, "This agent does not accept images; 2 image(s) were left out."},
		{adapter.NetworkRefused{Refusal: netproxy.Refusal{Host: "pypi.org", Port: 443, Reason: "not in agents.py.allow_hosts"}},
			"The agent tried to reach pypi.org:443, which its profile does not allow (not in agents.py.allow_hosts); it was refused."},
		{adapter.NetworkRefused{Refusal: netproxy.Refusal{Host: "::1", Port: 80, Reason: "a loopback address"}},
			"The agent tried to reach [::1]:80, which its profile does not allow (a loopback address); it was refused."},
		// Too many connections at once names no host, and no ":0".
		{adapter.NetworkRefused{Refusal: netproxy.Refusal{Reason: "too many connections open (at most 256)"}},
			"The agent's network connection was refused: too many connections open (at most 256)."},
		{adapter.PermissionDecided{Tool: "Read file.go", Action: policy.Allow, By: adapter.Decider{N: 2, Rule: r[1]}},
			"Allowed “Read file.go” by rule 2 (kind read or search)."},
		{adapter.PermissionDecided{Tool: "Read x; rm -rf /", Action: policy.Deny, By: adapter.Decider{N: 1, Rule: r[0]}},
			"Denied “Read x; rm -rf /” by rule 1 (title \"rm -rf\")."},
		{adapter.PermissionDecided{Tool: "Run go test ./...", Action: policy.Allow, By: adapter.Decider{N: 3, Rule: r[2]}},
			"Allowed “Run go test ./...” by rule 3 (kind execute, title \"^Run go \")."},
		{adapter.PermissionDecided{Tool: "Run rm -rf build", Action: policy.Allow, By: adapter.Decider{Setting: "turn.permission_mode", Mode: "allow"}},
			"Allowed “Run rm -rf build” by turn.permission_mode = allow."},
		{adapter.PermissionDecided{Tool: "Edit b", Action: policy.Deny, By: engine},
			"Denied “Edit b” by turn.permission_mode = deny."},
		{adapter.PermissionDecided{Tool: "Edit c", Action: policy.Allow, By: adapter.Decider{Setting: "schedule nightly's permission_mode", Mode: "allow"}},
			"Allowed “Edit c” by schedule nightly's permission_mode = allow."},
		{adapter.PermissionDecided{Tool: "Edit d", Action: policy.Deny, By: adapter.Decider{Mode: "deny"}},
			"Denied “Edit d” by the prompt's permission mode = deny."},
		{adapter.PermissionNoOption{Tool: "Read a", Action: policy.Allow, By: adapter.Decider{N: 1, Rule: r[3]}, Missing: acp.OptionAllowOnce},
			"“Read a” answered cancelled: rule 1 (kind read) allows it, but the agent offers no allow_once option."},
		{adapter.PermissionNoOption{Tool: "Edit a", Action: policy.Deny, By: engine, Missing: acp.OptionRejectOnce},
			"“Edit a” answered cancelled: turn.permission_mode = deny denies it, but the agent offers no reject_once option."},
		{adapter.PermissionTimedOut{Tool: "Run rm -rf build", After: 2 * time.Second},
			`Permission for "Run rm -rf build" was not answered within 2s; answered cancelled.`},
		{adapter.PermissionTimedOut{Tool: "Run make", After: 5 * time.Minute},
			`Permission for "Run make" was not answered within 5m; answered cancelled.`},
		{adapter.QuestionUnaskable{Question: "Where do you live?", Fields: []acp.ElicitationField{{Key: "address", Type: "object"}, {Key: "k", Title: "Pets", Type: "array"}}},
			"The agent asked “Where do you live?”, but it has fields that cannot be asked here: address (object), Pets (array); answered decline."},
		{adapter.QuestionInvalid{Question: "Tell me", Err: errors.New(`the form's schema is of type "array", not an object`)},
			"The agent asked “Tell me”, but the form's schema is of type \"array\", not an object; answered decline."},
		{adapter.QuestionUnanswerable{Question: "Tell me about the release"},
			"The agent asked “Tell me about the release”, but questions cannot be answered here; answered decline."},
		{adapter.QuestionTimedOut{Question: "Sign in to the tracker", After: time.Second},
			"The agent's question “Sign in to the tracker” was not answered within 1s; answered cancel."},
		// A question is said on one line, at most 120 characters.
		{adapter.QuestionTimedOut{Question: " Which\n  branch?\t", After: time.Minute},
			"The agent's question “Which branch?” was not answered within 1m; answered cancel."},
		{adapter.QuestionUnanswerable{Question: strings.Repeat("é", 121)},
			"The agent asked “" + strings.Repeat("é", 119) + "…”, but questions cannot be answered here; answered decline."},
		{adapter.QuestionUnanswerable{Question: strings.Repeat("é", 120)},
			"The agent asked “" + strings.Repeat("é", 120) + "”, but questions cannot be answered here; answered decline."},
		{adapter.QuestionInvalid{Question: " ", Err: errors.New("it is not a form")},
			"The agent asked “a question”, but it is not a form; answered decline."},
		{adapter.ChoiceNotApplied{Option: "Model", Err: errors.New(`invalid value "big" for Model (it offers a, b)`)},
			`Your choice for Model was not applied: invalid value "big" for Model (it offers a, b).`},
		{adapter.ChoiceNotApplied{Option: "Model", Value: "b", Err: errors.New("agent error -32602: no")},
			"Your choice b for Model was not applied: agent error -32602: no."},
		{adapter.ModeNotApplied{Mode: "plan", Gone: true},
			"Your choice of mode plan was not applied: the agent no longer offers it."},
		{adapter.ModeNotApplied{Mode: "plan", Err: errors.New("agent error -32603: busy")},
			"Your choice of mode plan was not applied: agent error -32603: busy."},
	} {
		said[reflect.TypeOf(c.n).Name()] = true
		kinds[c.n.Kind()] = true
		if got := NoticeText(c.n); got != c.want {
			t.Errorf("%s %+v:\n got %q\nwant %q", c.n.Kind(), c.n, got, c.want)
		}
	}
	// Every notice the engine declares is among those said above, and
	// the README names its kind among the API's events.
	for _, name := range noticeTypes(t) {
		if !said[name] {
			t.Errorf("adapter.%s is not said in this test", name)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range kinds {
		if !strings.Contains(string(readme), "`"+k+"`") {
			t.Errorf("README does not name the notice kind %s", k)
		}
	}
}

// noticeTypes names the types adapter/notice.go gives a Kind method.
func noticeTypes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../adapter/notice.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == "Kind" {
			if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok {
				names = append(names, id.Name)
			}
		}
	}
	if len(names) == 0 {
		t.Fatalf("found %d notice types in adapter/notice.go: %v", len(names), names)
	}
	return names
}

// A duration is said as a setting is written: no trailing zero units.
func TestNoticeText_DurationsAsSettingsAreWritten(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Second: "1s", 10 * time.Second: "10s", 90 * time.Second: "1m30s",
		5 * time.Minute: "5m", 30 * time.Minute: "30m", 2 * time.Hour: "2h", 70 * time.Minute: "1h10m",
		time.Hour + 10*time.Second: "1h0m10s", 1500 * time.Millisecond: "1.5s",
	} {
		got := NoticeText(adapter.PermissionTimedOut{Tool: "x", After: d})
		if !strings.Contains(got, " within "+want+";") {
			t.Errorf("%v said %q, want %q", d, got, want)
		}
	}
}

func TestStatusText_SaysEachPhase(t *testing.T) {
	for _, c := range []struct {
		st   adapter.Status
		want string
	}{
		{adapter.Status{Phase: adapter.PhaseQueued, Position: 2}, "queued behind 2 other message(s)"},
		{adapter.Status{Phase: adapter.PhaseNext, Position: 1}, "sent next"},
		{adapter.Status{Phase: adapter.PhaseNext, Position: 1, Interrupting: true}, "sent next: the running turn is being interrupted"},
		{adapter.Status{Phase: adapter.PhaseWaitingForSlot}, "waiting for a free agent slot"},
		{adapter.Status{Phase: adapter.PhaseWaitingForHost}, "waiting for an agent host with room for this thread's agent"},
		{adapter.Status{Phase: adapter.PhaseWorking}, "working"},
		{adapter.Status{Phase: adapter.PhaseCancelling, Cause: errors.New("broker shutting down")}, "stopping: broker shutting down"},
	} {
		if got := StatusText(c.st); got != c.want {
			t.Errorf("StatusText(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}

// A thread whose idle agent's host was lost is told which host, that its
// next message starts elsewhere, and where its work is: on the lost host,
// or, with a shared repository, what was committed follows the thread.
func TestIdleHostLostText_SaysTheHostAndWhereTheWorkIs(t *testing.T) {
	for _, tc := range []struct {
		shared bool
		want   string
	}{
		{false, "Agent host gpu-1, which ran this thread's agent, stopped answering: the agent is gone. Your next message starts a new one on another agent host; the files of its workspace stayed on gpu-1."},
		{true, "Agent host gpu-1, which ran this thread's agent, stopped answering: the agent is gone. Your next message starts a new one on another agent host; what its agent committed follows the thread, through the shared repository; what it left uncommitted stayed on gpu-1."},
	} {
		if got := IdleHostLostText("gpu-1", tc.shared); got != tc.want {
			t.Errorf("shared %v:\n got %q\nwant %q", tc.shared, got, tc.want)
		}
	}
}

// A branch not pushed after a turn is said with the host's reason on one
// line, and where the committed work is.
func TestPushFailedText_SaysWhyAndWhereTheWorkIs(t *testing.T) {
	got := PushFailedText("gpu-1", "acp/t was not published to /srv/shared.git (fetch first):\nthe branch there has commits this host's has not.")
	want := "This thread's branch could not be pushed to the shared repository: acp/t was not published to /srv/shared.git (fetch first): the branch there has commits this host's has not. Its committed work stays on agent host gpu-1 until a push succeeds."
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
