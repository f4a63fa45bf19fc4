package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// asker answers questions with its function, and permissions with
// approve ("cancelled" when nil).
type asker struct {
	elicit  func(ctx context.Context, r *ElicitationRequest) ElicitationResult
	approve ApproverFunc
}

func (a asker) Approve(ctx context.Context, r *PermissionRequest) PermissionOutcome {
	if a.approve == nil {
		return PermissionOutcome{}
	}
	return a.approve(ctx, r)
}

func (a asker) Elicit(ctx context.Context, r *ElicitationRequest) ElicitationResult {
	return a.elicit(ctx, r)
}

const releaseForm = `{"type":"object","properties":{` +
	`"name":{"type":"string","title":"Name","minLength":2},` +
	`"count":{"type":"integer","title":"Count","minimum":1,"maximum":10,"default":3},` +
	`"colour":{"type":"string","enum":["red","green"]},` +
	`"size":{"type":"string","oneOf":[{"const":"s","title":"Small"},{"const":"l","title":"Large"}]},` +
	`"ship":{"type":"boolean","default":true},` +
	`"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]},"maxItems":2},` +
	`"ratio":{"type":"number"}},"required":["name","colour"]}`

func formRequest(id, sid, schema string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"elicitation/create","params":{"sessionId":%q,"mode":"form","message":"Tell me","requestedSchema":%s}}`, id, sid, schema)
}

func urlRequest(id, sid, elicitationID string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"elicitation/create","params":{"sessionId":%q,"mode":"url","message":"Sign in","url":"https://example.com/a?b=c","elicitationId":%q}}`, id, sid, elicitationID)
}

func TestInitialize_AdvertisesBothElicitationModes(t *testing.T) {
	c, p := newPair(t, Options{})
	done := asyncResult(func() error { _, err := c.Initialize(context.Background()); return err })
	req := p.NextMethod("initialize")
	var params struct {
		ClientCapabilities struct {
			Elicitation map[string]json.RawMessage
		}
	}
	json.Unmarshal(req["params"], &params)
	e := params.ClientCapabilities.Elicitation
	if string(e["form"]) != "{}" || string(e["url"]) != "{}" {
		t.Fatalf("initialize params = %s, want elicitation {form:{}, url:{}}", req["params"])
	}
	p.Reply(req, `{"protocolVersion":1}`)
	if err := waitErr(t, done); err != nil {
		t.Fatal(err)
	}
}

// A form reaches the Elicitor with its fields in the agent's order and of
// the right kinds; the answer goes back as {action, content}.
func TestElicitation_FormIsAskedAndAnswered(t *testing.T) {
	c, p := newPair(t, Options{})
	got := make(chan *ElicitationRequest, 1)
	sub, _ := c.Subscribe("s", asker{elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
		got <- r
		return ElicitationResult{Action: ActionAccept, Content: map[string]any{"name": "Ada", "colour": "red", "count": int64(4), "tags": []string{"a", "c"}}}
	}})
	defer sub.Close()
	p.Send(formRequest("5", "s", releaseForm))
	r := <-got
	var keys []string
	var kinds []FieldKind
	for _, f := range r.Schema.Fields {
		keys = append(keys, f.Key)
		kinds = append(kinds, f.Kind)
	}
	if want := []string{"name", "count", "colour", "size", "ship", "tags", "ratio"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("fields %v, want %v", keys, want)
	}
	if want := []FieldKind{FieldText, FieldInteger, FieldSelect, FieldSelect, FieldBoolean, FieldMultiSelect, FieldNumber}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	if !r.Field("name").Required || r.Field("count").Required || r.Field("size").Options[1].Label() != "Large" {
		t.Fatalf("fields = %+v", r.Schema.Fields)
	}
	if v, ok := r.Field("count").DefaultValue(); !ok || v != int64(3) {
		t.Fatalf("count default = %v %v", v, ok)
	}
	m := p.Next()
	if string(m["id"]) != "5" || string(m["result"]) != `{"action":"accept","content":{"colour":"red","count":4,"name":"Ada","tags":["a","c"]}}` {
		t.Fatalf("reply = %s %s", m["id"], m["result"])
	}
	waitServed(t, c, 0)
	if s := c.Stats(); s.PendingElicitations != 0 {
		t.Fatalf("stats after the answer = %+v", s)
	}
}

// An answer that does not fit the form (a required field missing, a
// value out of bounds, a field the form lacks, an unknown action) is
// answered "cancel", never passed on.
func TestElicitation_AnswerThatDoesNotFitIsAnsweredCancel(t *testing.T) {
	for _, content := range []map[string]any{
		{"name": "Ada"},
		{"name": "Ada", "colour": "blue"},
		{"name": "Ada", "colour": "red", "count": int64(11)},
		{"name": "Ada", "colour": "red", "extra": "x"},
		{"name": "A", "colour": "red"},
		{"name": "Ada", "colour": "red", "tags": []string{"a", "b", "c"}},
	} {
		c, p := newPair(t, Options{})
		sub, _ := c.Subscribe("s", asker{elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
			return ElicitationResult{Action: ActionAccept, Content: content}
		}})
		p.Send(formRequest("1", "s", releaseForm))
		if m := p.Next(); string(m["result"]) != `{"action":"cancel"}` {
			t.Fatalf("content %v answered %s", content, m["result"])
		}
		sub.Close()
	}
	c, p := newPair(t, Options{})
	sub, _ := c.Subscribe("s", asker{elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
		return ElicitationResult{Action: "maybe"}
	}})
	defer sub.Close()
	p.Send(urlRequest("2", "s", "e"))
	if m := p.Next(); string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("unknown action answered %s", m["result"])
	}
}

// The turn's end (CancelPermissions, as an abandoned turn does) answers an
// open question "cancel" at once and releases its entry.
func TestElicitation_TurnEndAnswersCancelAndReleases(t *testing.T) {
	c, p := newPair(t, Options{})
	asked := make(chan struct{})
	sub, _ := c.Subscribe("s", asker{elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
		close(asked)
		<-ctx.Done()
		return ElicitationResult{Action: ActionAccept}
	}})
	defer sub.Close()
	p.Send(urlRequest(`"q-1"`, "s", "el-1"))
	<-asked
	if s := c.Stats(); s.PendingElicitations != 1 || s.PendingPermissions != 0 {
		t.Fatalf("stats while asking = %+v", s)
	}
	c.CancelPermissions("s", errors.New("turn cancelled"))
	m := p.Next()
	if string(m["id"]) != `"q-1"` || string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("reply = %s %s", m["id"], m["result"])
	}
	waitServed(t, c, 0)
	if s := c.Stats(); s.PendingElicitations != 0 {
		t.Fatalf("pending elicitations = %d after the cancel", s.PendingElicitations)
	}
}

// Nobody to ask: no turn, a turn that takes no questions, a question
// scoped to a request: "cancel". A mode we did not advertise: -32602.
func TestElicitation_NobodyToAskOrUnknownMode(t *testing.T) {
	c, p := newPair(t, Options{})
	p.Send(formRequest("1", "nobody", releaseForm))
	if m := p.Next(); string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("no turn: %v", m)
	}
	sub, _ := c.Subscribe("s", ApproverFunc(func(context.Context, *PermissionRequest) PermissionOutcome { return PermissionOutcome{} }))
	defer sub.Close()
	p.Send(formRequest("2", "s", releaseForm))
	if m := p.Next(); string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("no Elicitor: %v", m)
	}
	p.Send(`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"requestId":7,"mode":"form","message":"x","requestedSchema":{"type":"object","properties":{}}}}`)
	if m := p.Next(); string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("request scope: %v", m)
	}
	for _, params := range []string{
		`{"sessionId":"s","mode":"telepathy","message":"x"}`,
		`{"sessionId":"s","mode":"url","message":"x","url":"https://x"}`,
		`{"sessionId":"s","mode":"form","message":"x"}`,
	} {
		p.Send(`{"jsonrpc":"2.0","id":4,"method":"elicitation/create","params":` + params + `}`)
		var e struct{ Code int }
		m := p.Next()
		json.Unmarshal(m["error"], &e)
		if e.Code != CodeInvalidParams {
			t.Fatalf("%s answered %v, want -32602", params, m)
		}
	}
	waitServed(t, c, 0)
}

// $/cancel_request from the agent ends our handling of that request of
// its own, which is answered -32800: a question or a permission request.
// An id that only our own pending call has, or none has, is ignored.
func TestCancelRequest_FromTheAgentAnswersMinus32800(t *testing.T) {
	c, p := newPair(t, Options{})
	asked := make(chan error, 2)
	sub, _ := c.Subscribe("s", asker{
		elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
			<-ctx.Done()
			asked <- context.Cause(ctx)
			return ElicitationResult{Action: ActionAccept}
		},
		approve: func(ctx context.Context, r *PermissionRequest) PermissionOutcome {
			<-ctx.Done()
			asked <- context.Cause(ctx)
			return PermissionOutcome{OptionID: "a"}
		},
	})
	defer sub.Close()
	ours, err := c.Start(context.Background(), "session/prompt", map[string]string{"sessionId": "s"})
	if err != nil {
		t.Fatal(err)
	}
	p.NextMethod("session/prompt")
	p.Send(formRequest("1", "s", releaseForm))
	p.Send(permissionRequest(`"p"`, "s"))
	waitServed(t, c, 2)
	// Our prompt's id is 1 too, and there is no request 99: nothing ends.
	p.Send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":99}}`)
	p.Send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"1"}}`)
	p.Send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1}}`)
	m := p.Next()
	var e struct {
		Code    int
		Message string
	}
	json.Unmarshal(m["error"], &e)
	if string(m["id"]) != "1" || e.Code != CodeCancelled {
		t.Fatalf("withdrawn question answered %s %s", m["id"], m["error"])
	}
	if cause := <-asked; !errors.Is(cause, ErrRequestCancelled) {
		t.Fatalf("the Elicitor's ctx ended with %v", cause)
	}
	p.Send(`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":"p"}}`)
	m = p.Next()
	json.Unmarshal(m["error"], &e)
	if string(m["id"]) != `"p"` || e.Code != CodeCancelled {
		t.Fatalf("withdrawn permission answered %s %s", m["id"], m["error"])
	}
	<-asked
	select {
	case <-ours.Done():
		t.Fatal("our own call with the same id was touched")
	default:
	}
	waitServed(t, c, 0)
	if s := c.Stats(); s.PendingElicitations != 0 || s.PendingPermissions != 0 || s.PendingRequests != 1 {
		t.Fatalf("stats = %+v", s)
	}
	// Sent as a request, it is refused; it ends nothing either.
	p.Send(`{"jsonrpc":"2.0","id":8,"method":"$/cancel_request","params":{"requestId":1}}`)
	if m := p.Next(); string(m["id"]) != "8" || m["error"] == nil {
		t.Fatalf("$/cancel_request as a request answered %v", m)
	}
}

// elicitation/complete closes the url question it names, answered
// "cancel" (nobody consented); an unknown id is ignored.
func TestElicitationComplete_ClosesTheOpenURLQuestion(t *testing.T) {
	c, p := newPair(t, Options{})
	causes := make(chan error, 1)
	asked := make(chan context.Context, 1)
	sub, _ := c.Subscribe("s", asker{elicit: func(ctx context.Context, r *ElicitationRequest) ElicitationResult {
		asked <- ctx
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ElicitationResult{Action: ActionAccept}
	}})
	defer sub.Close()
	p.Send(urlRequest("4", "s", "el-9"))
	ctx := <-asked
	p.Send(`{"jsonrpc":"2.0","method":"elicitation/complete","params":{"elicitationId":"el-other"}}`)
	// The read loop handles messages in order, and a completion ends its
	// question's wait there: once a later request is answered, the
	// unknown id has been handled.
	p.Send(`{"jsonrpc":"2.0","id":5,"method":"no/such"}`)
	if m := p.Next(); string(m["id"]) != "5" {
		t.Fatalf("the probe was answered %v", m)
	}
	if ctx.Err() != nil || c.Stats().PendingElicitations != 1 {
		t.Fatalf("an unknown id closed something: %v, %d open", context.Cause(ctx), c.Stats().PendingElicitations)
	}
	p.Send(`{"jsonrpc":"2.0","method":"elicitation/complete","params":{"elicitationId":"el-9"}}`)
	if m := p.Next(); string(m["id"]) != "4" || string(m["result"]) != `{"action":"cancel"}` {
		t.Fatalf("reply = %v", m)
	}
	if cause := <-causes; !errors.Is(cause, ErrElicitationComplete) {
		t.Fatalf("cause = %v", cause)
	}
	waitServed(t, c, 0)
}

// Call.Cancel sends $/cancel_request with the call's id while it is
// pending, and nothing once it is answered.
func TestCall_CancelSendsCancelRequestWhilePending(t *testing.T) {
	c, p := newPair(t, Options{})
	call, err := c.Start(context.Background(), "session/prompt", map[string]string{"sessionId": "s"})
	if err != nil {
		t.Fatal(err)
	}
	req := p.NextMethod("session/prompt")
	call.Cancel()
	m := p.Next()
	if str(m["method"]) != "$/cancel_request" || m["id"] != nil || string(m["params"]) != `{"requestId":`+string(req["id"])+`}` {
		t.Fatalf("sent %v", m)
	}
	p.Reply(req, `{"stopReason":"cancelled"}`)
	waitDone(t, call)
	call.Cancel()
	c.CancelSession("s")
	if m := p.Next(); str(m["method"]) != "session/cancel" {
		t.Fatalf("after the answer, Cancel sent %v", m)
	}
}

func TestElicitationField_ParseAndUnsupported(t *testing.T) {
	var r ElicitationRequest
	if err := json.Unmarshal([]byte(`{"sessionId":"s","mode":"form","message":"m","requestedSchema":`+releaseForm+`}`), &r); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, in string
		want    any
		bad     bool
	}{
		{"name", "  Ada ", "Ada", false},
		{"name", "A", nil, true},
		{"count", "7", int64(7), false},
		{"count", "7.5", nil, true},
		{"count", "0", nil, true},
		{"ratio", "0.25", 0.25, false},
		{"ratio", "many", nil, true},
		{"ship", "Yes", true, false},
		{"ship", "n", false, false},
		{"ship", "maybe", nil, true},
		{"colour", "2", "green", false},
		{"colour", "red", "red", false},
		{"colour", "blue", nil, true},
		{"size", "large", "l", false},
		{"tags", "1, c", []string{"a", "c"}, false},
		{"tags", "", []string{}, false},
		{"tags", "a,b,c", nil, true},
	} {
		got, err := r.Field(tc.key).Parse(tc.in)
		if (err != nil) != tc.bad || !tc.bad && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s.Parse(%q) = %#v, %v", tc.key, tc.in, got, err)
		}
	}
	var odd ElicitationRequest
	json.Unmarshal([]byte(`{"mode":"form","message":"m","requestedSchema":{"type":"object","properties":{
		"ok":{"type":"string"},
		"obj":{"type":"object","properties":{"x":{"type":"string"}}},
		"nums":{"type":"array","items":{"type":"number"}},
		"free":{"type":"array","items":{"type":"string"}},
		"mixed":{"type":"string","enum":["a",1]},
		"either":{"type":["string","null"]}}}}`), &odd)
	bad, err := odd.Unsupported()
	var keys []string
	for _, f := range bad {
		keys = append(keys, f.Key)
	}
	if err != nil || strings.Join(keys, ",") != "obj,nums,free,mixed,either" {
		t.Fatalf("unsupported = %v, %v", keys, err)
	}
}

// A form of endless fields costs the broker no more than its bound: past
// maxFormFields it is refused, and the work does not grow with the
// fields times the required names.
func TestElicitationSchema_AnEndlessFormIsRefused(t *testing.T) {
	var props, req strings.Builder
	for i := range 50000 {
		if i > 0 {
			props.WriteString(",")
			req.WriteString(",")
		}
		fmt.Fprintf(&props, `"f%d":{"type":"string"}`, i)
		fmt.Fprintf(&req, `"f%d"`, i)
	}
	body := `{"sessionId":"s","mode":"form","message":"m","requestedSchema":{"type":"object","properties":{` + props.String() + `},"required":[` + req.String() + `]}}`
	start := time.Now()
	var r ElicitationRequest
	err := json.Unmarshal([]byte(body), &r)
	if err == nil || !strings.Contains(err.Error(), "more than 64 fields") {
		t.Fatalf("a 50,000-field form: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("refusing it took %s", took)
	}
	var ok ElicitationRequest
	if err := json.Unmarshal([]byte(`{"sessionId":"s","mode":"form","message":"m","requestedSchema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}}`), &ok); err != nil || len(ok.Schema.Fields) != 1 || !ok.Schema.Fields[0].Required {
		t.Fatalf("a one-field form: %+v, %v", ok.Schema, err)
	}
}
