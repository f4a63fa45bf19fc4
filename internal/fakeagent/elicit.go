package fakeagent

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The forms the elicit-* modes ask.
var (
	releaseForm = map[string]any{
		"type":  "object",
		"title": "Release",
		"properties": map[string]any{
			"name":   map[string]any{"type": "string", "title": "Name", "description": "what the release is called"},
			"count":  map[string]any{"type": "integer", "title": "Count", "minimum": 1, "maximum": 10},
			"colour": map[string]any{"type": "string", "title": "Colour", "enum": []string{"red", "green", "blue"}},
			"ship":   map[string]any{"type": "boolean", "title": "Ship it"},
		},
		"required": []string{"name"},
	}
	// bigForm has more text fields than one Discord modal holds and a
	// choice of more options than one select menu does.
	bigForm = func() map[string]any {
		props := map[string]any{}
		for i := 1; i <= 6; i++ {
			props[fmt.Sprintf("line%d", i)] = map[string]any{"type": "string", "title": fmt.Sprintf("Line %d", i)}
		}
		var many []string
		for i := 1; i <= 30; i++ {
			many = append(many, fmt.Sprintf("option-%d", i))
		}
		props["pick"] = map[string]any{"type": "string", "enum": many}
		return map[string]any{"type": "object", "properties": props}
	}()
	// oddForm has a nested object, which no chat can ask for.
	oddForm = map[string]any{"type": "object", "properties": map[string]any{
		"name":    map[string]any{"type": "string"},
		"address": map[string]any{"type": "object", "properties": map[string]any{"street": map[string]any{"type": "string"}}},
	}}
)

// elicits reports whether the client advertised the elicitation mode,
// saying so in the turn when it did not.
func (a *agent) elicits(t *turn, mode string) bool {
	a.mu.Lock()
	caps := a.clientCaps
	a.mu.Unlock()
	var c struct {
		Elicitation map[string]json.RawMessage `json:"elicitation"`
	}
	json.Unmarshal(caps, &c)
	if v, ok := c.Elicitation[mode]; ok && string(v) != "null" {
		return true
	}
	a.chunk(t.sid, "the client did not advertise elicitation mode "+mode)
	t.stop("end_turn")
	return false
}

// elicit runs the elicit-* modes: it asks a question and says what came
// back, "answer: ACTION CONTENT" or "answer: error CODE", then ends the
// turn ("cancelled" after session/cancel). Like real agents it waits for
// the answer however long it takes: a question left open hangs the turn.
func (a *agent) elicit(t *turn, cmd string, args []string) {
	mode := "form"
	if cmd == "elicit-url" {
		mode = "url"
	}
	if !a.elicits(t, mode) {
		return
	}
	params := map[string]any{"mode": "form", "message": "Tell me about the release"}
	switch cmd {
	case "elicit-form", "elicit-cancel-request":
		params["requestedSchema"] = releaseForm
	case "elicit-big":
		params["message"] = "Fill in all of this"
		params["requestedSchema"] = bigForm
	case "elicit-odd":
		params["message"] = "Where do you live?"
		params["requestedSchema"] = oddForm
	case "elicit-url":
		params = map[string]any{"mode": "url", "message": "Sign in to the tracker",
			"url": "https://tracker.example/auth?state=x1&next=/t", "elicitationId": "el-" + strconv.Itoa(a.opts.PID)}
	}
	a.ask(t, cmd, args, params)
}

// elicitJSON asks the question whose params (all but the session) are
// raw, a JSON object, and says the answer as elicit does.
func (a *agent) elicitJSON(t *turn, raw string) {
	var params map[string]any
	if err := json.Unmarshal([]byte(raw), &params); err != nil {
		a.chunk(t.sid, "elicit-json: "+err.Error())
		t.stop("end_turn")
		return
	}
	mode, _ := params["mode"].(string)
	if mode == "" {
		mode = "form"
		params["mode"] = mode
	}
	if !a.elicits(t, mode) {
		return
	}
	a.ask(t, "elicit-json", nil, params)
}

// ask sends elicitation/create with params in the turn's session, waits
// for the answer and says it.
func (a *agent) ask(t *turn, cmd string, args []string, params map[string]any) {
	sid := t.sid
	arg := func(i int, def string) string {
		if i < len(args) {
			return args[i]
		}
		return def
	}
	params["sessionId"] = sid
	id, answer := a.requestAsync("elicitation/create", params)
	switch {
	case cmd == "elicit-cancel-request":
		if !t.wait(dur(arg(0, "300ms"))) {
			return
		}
		a.send(map[string]any{"jsonrpc": "2.0", "method": "$/cancel_request", "params": map[string]any{"requestId": id}})
	case cmd == "elicit-url" && arg(0, "") == "complete":
		if !t.wait(dur(arg(1, "300ms"))) {
			return
		}
		a.send(map[string]any{"jsonrpc": "2.0", "method": "elicitation/complete", "params": map[string]any{"elicitationId": params["elicitationId"]}})
	}
	var resp message
	select {
	case resp = <-answer:
	case <-a.ctx.Done():
		return
	}
	if resp.Error != nil {
		a.chunk(sid, fmt.Sprintf("answer: error %d\n", resp.Error.Code))
	} else {
		var res struct {
			Action  string          `json:"action"`
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal(resp.Result, &res)
		text := "answer: " + res.Action
		if len(res.Content) > 0 {
			var content map[string]any
			json.Unmarshal(res.Content, &content)
			b, _ := json.Marshal(content) // keys sorted
			text += " " + string(b)
		}
		a.chunk(sid, text+"\n")
	}
	select {
	case <-t.cancel:
		t.stop("cancelled")
	default:
		t.stop("end_turn")
	}
}

// requestAsync sends a request to the client and returns its id and the
// channel its answer arrives on.
func (a *agent) requestAsync(method string, params any) (json.RawMessage, <-chan message) {
	a.mu.Lock()
	id := strconv.Itoa(a.nextID)
	if a.opts.StringIDs {
		id = strconv.Quote(fmt.Sprintf("req-%08x-%d", a.opts.PID, a.nextID))
	}
	a.nextID++
	ch := make(chan message, 1)
	a.waiting[id] = ch
	a.mu.Unlock()
	raw := json.RawMessage(id)
	a.send(map[string]any{"jsonrpc": "2.0", "id": &raw, "method": method, "params": params})
	return raw, ch
}
