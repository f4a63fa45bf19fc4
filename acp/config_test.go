package acp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The options of a real claude-like session: a grouped model select, a
// boolean, and a type the broker does not know.
var setupAnswer = strings.ReplaceAll(`{"sessionId":"S1",
 "modes":{"currentModeId":"ask","availableModes":[{"id":"ask","name":"Ask"},{"id":"code","name":"Code","description":"edits files"}]},
 "configOptions":[
  {"id":"model","name":"Model","category":"model","type":"select","currentValue":"m1",
   "options":[{"group":"fast","name":"Fast","options":[{"value":"m1","name":"Model One"}]},{"value":"m2","name":"Model Two","description":"big"}]},
  {"id":"web","name":"Web search","type":"boolean","currentValue":true},
  {"id":"colour","name":"Colour","type":"multi_select","currentValue":["red"]},
  {"id":"broken","type":"select","currentValue":7}
 ]}`, "\n", "")

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// initialize says the client shows boolean options.
func TestInitialize_AdvertisesBooleanConfigOptions(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, err := c.Initialize(context.Background()); return err })
	req := p.NextMethod("initialize")
	var params struct {
		ClientCapabilities struct {
			Session struct {
				ConfigOptions map[string]json.RawMessage `json:"configOptions"`
			} `json:"session"`
		} `json:"clientCapabilities"`
	}
	json.Unmarshal(req["params"], &params)
	if b, ok := params.ClientCapabilities.Session.ConfigOptions["boolean"]; !ok || string(b) != "{}" {
		t.Fatalf("initialize params = %s, want clientCapabilities.session.configOptions.boolean = {}", req["params"])
	}
	p.Reply(req, `{"protocolVersion":1}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

// The session/new answer's options and modes, and the commands sent
// before it, make the session's state; options of an unknown type, or
// unusable, are skipped and counted.
func TestSessionState_ComesFromTheSetupAnswerAndEarlyUpdates(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, _, err := c.NewSession(context.Background(), ".", nil); return err })
	req := p.NextMethod("session/new")
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"review","description":"Review changes","input":{"hint":"branch"}},{"name":"init","description":"","input":null}]}}}`)
	p.Reply(req, setupAnswer)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	st, ok := c.SessionState("S1")
	if !ok {
		t.Fatal("session S1 unknown")
	}
	if len(st.Options) != 2 {
		t.Fatalf("options = %+v, want model and web only", st.Options)
	}
	model, _ := st.ByCategory(CategoryModel)
	if model.ID != "model" || model.Value != "m1" || model.Current() != "Model One" || len(model.Choices) != 2 ||
		model.Choices[0].Group != "Fast" || model.Choices[1].Description != "big" {
		t.Fatalf("model option = %+v", model)
	}
	web, _ := st.Option("web")
	if web.Type != ConfigBoolean || !web.On || web.Current() != "on" {
		t.Fatalf("web option = %+v", web)
	}
	if st.Modes == nil || st.Modes.Current != "ask" || len(st.Modes.Available) != 2 {
		t.Fatalf("modes = %+v", st.Modes)
	}
	if len(st.Commands) != 2 || st.Commands[0].Hint != "branch" || st.Commands[1].Name != "init" {
		t.Fatalf("commands = %+v", st.Commands)
	}
	if n := c.Stats().UnknownConfigOptions; n != 2 {
		t.Fatalf("UnknownConfigOptions = %d, want 2", n)
	}
}

// Updates of the session's state change it with no turn listening, and
// are not late; with a turn listening, the turn sees them too.
func TestSessionState_FollowsUpdatesBetweenAndDuringTurns(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, _, err := c.NewSession(context.Background(), ".", nil); return err })
	p.Reply(p.NextMethod("session/new"), setupAnswer)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"current_mode_update","currentModeId":"code"}}}`)
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","type":"select","currentValue":"m2","options":[{"value":"m2","name":"Model Two"}]}]}}}`)
	waitFor(t, "the update", func() bool {
		st, _ := c.SessionState("S1")
		return len(st.Options) == 1 && st.Options[0].Value == "m2" && st.Modes.Current == "code"
	})
	if n := c.Stats().LateUpdates; n != 0 {
		t.Fatalf("LateUpdates = %d: state updates with no turn are not late", n)
	}

	sub, err := c.Subscribe("S1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	p.Send(`{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"available_commands_update","availableCommands":[{"name":"compact","description":"Compact"}]}}}`)
	select {
	case u := <-sub.Updates():
		if u.Kind != UpdateAvailableCommands {
			t.Fatalf("turn got %q", u.Kind)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the turn did not see the update")
	}
	if st, _ := c.SessionState("S1"); len(st.Commands) != 1 || st.Commands[0].Name != "compact" {
		t.Fatalf("commands = %+v", st.Commands)
	}
}

// set_config_option sends a string for a select and type "boolean" with a
// bool; the answer's options replace the session's. set_mode sends the
// mode id and, answered, the mode is in force.
func TestSetConfigOptionAndSetMode_WireShapes(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, _, err := c.NewSession(context.Background(), ".", nil); return err })
	p.Reply(p.NextMethod("session/new"), setupAnswer)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}

	var st SessionState
	done = asyncResult(func() error {
		var err error
		st, err = c.SetConfigOption(context.Background(), "S1", "model", "m2")
		return err
	})
	req := p.NextMethod(MethodSetConfigOption)
	if got := string(req["params"]); got != `{"configId":"model","sessionId":"S1","value":"m2"}` {
		t.Fatalf("params = %s", got)
	}
	p.Reply(req, `{"configOptions":[{"id":"model","name":"Model","type":"select","currentValue":"m2","options":[{"value":"m1"},{"value":"m2"}]}]}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if len(st.Options) != 1 || st.Options[0].Value != "m2" {
		t.Fatalf("state after set = %+v", st.Options)
	}

	done = asyncResult(func() error { _, err := c.SetConfigOption(context.Background(), "S1", "web", false); return err })
	req = p.NextMethod(MethodSetConfigOption)
	if got := string(req["params"]); got != `{"configId":"web","sessionId":"S1","type":"boolean","value":false}` {
		t.Fatalf("params = %s", got)
	}
	p.ReplyErr(req, -32602, "no such option")
	if err := waitErr(t, done); err == nil || !strings.Contains(err.Error(), "no such option") {
		t.Fatalf("refused set = %v, want the agent's words", err)
	}

	done = asyncResult(func() error { _, err := c.SetMode(context.Background(), "S1", "code"); return err })
	req = p.NextMethod(MethodSetMode)
	if got := string(req["params"]); got != `{"modeId":"code","sessionId":"S1"}` {
		t.Fatalf("params = %s", got)
	}
	p.Reply(req, `{}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.SessionState("S1"); st.Modes.Current != "code" {
		t.Fatalf("mode = %q, want code", st.Modes.Current)
	}
	if _, err := c.SetConfigOption(context.Background(), "S1", "n", 3); err == nil {
		t.Fatal("a number value was sent")
	}
}

// session/load answers null or an object with the session's options;
// both are accepted, and an answer whose options cannot be read still
// loads the session.
func TestLoadSession_TakesOptionsFromAnObjectAnswer(t *testing.T) {
	for _, answer := range []string{`null`, `{"configOptions":"nonsense","modes":3}`, setupAnswer} {
		c, p := newPair(t, Options{})
		done := asyncResult(func() error { _, err := c.LoadSession(context.Background(), "S1", ".", nil); return err })
		p.Reply(p.NextMethod("session/load"), answer)
		if err := waitErr(t, done); err != nil {
			t.Fatalf("answer %s: %v", answer, err)
		}
		st, ok := c.SessionState("S1")
		if !ok || (answer == setupAnswer) != (len(st.Options) == 2) {
			t.Fatalf("answer %s: state %+v", answer, st)
		}
	}
}
