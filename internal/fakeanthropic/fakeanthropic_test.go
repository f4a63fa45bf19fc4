package fakeanthropic

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/fakemodel"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start(Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// client is an HTTP client whose connections are closed when the test ends.
func client(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func do(t *testing.T, ctx context.Context, method, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func post(t *testing.T, ctx context.Context, s *Server, body string) *http.Response {
	t.Helper()
	return do(t, ctx, http.MethodPost, s.URL()+"/v1/messages?beta=true", body)
}

// readEvents parses the whole SSE body.
func readEvents(t *testing.T, resp *http.Response) []fakemodel.Event {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	evs, err := fakemodel.ReadEvents(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func names(evs []fakemodel.Event) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.Name)
	}
	return strings.Join(n, " ")
}

const mainRequest = `{"model":"claude-sonnet-4-6","max_tokens":1000,"stream":true,"tools":[{"name":"Bash","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}`

// TestTextIsStreamedAsMessageEvents proves the event sequence of a text
// reply: message_start, a text block with one delta per chunk, then
// message_delta with stop reason end_turn and message_stop.
func TestTextIsStreamedAsMessageEvents(t *testing.T) {
	s := start(t)
	s.Enqueue(Text("Hel", "lo"))
	evs := readEvents(t, post(t, context.Background(), s, mainRequest))
	want := "message_start content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := names(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	msg := evs[0].Data["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["model"] != "claude-sonnet-4-6" || msg["usage"] == nil {
		t.Errorf("message_start %v", msg)
	}
	d1 := evs[2].Data["delta"].(map[string]any)
	d2 := evs[3].Data["delta"].(map[string]any)
	if d1["type"] != "text_delta" || d1["text"] != "Hel" || d2["text"] != "lo" {
		t.Errorf("deltas %v %v", d1, d2)
	}
	if stop := evs[5].Data["delta"].(map[string]any)["stop_reason"]; stop != "end_turn" {
		t.Errorf("stop reason %v", stop)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || !reqs[0].Scripted || reqs[0].Served != "text" || reqs[0].Query != "beta=true" || !reqs[0].Stream || reqs[0].Tools != 1 {
		t.Errorf("recorded %+v", reqs)
	}
}

// TestBashToolUseThenResultIsRecorded proves that Bash streams a tool_use
// block whose input JSON is {command, description} with stop reason
// tool_use, and that the tool_result of the next request is recorded.
func TestBashToolUseThenResultIsRecorded(t *testing.T) {
	s := start(t)
	s.Enqueue(Bash("touch x", "make x"), Text("done"))
	evs := readEvents(t, post(t, context.Background(), s, mainRequest))
	block := evs[1].Data["content_block"].(map[string]any)
	if block["type"] != "tool_use" || block["name"] != "Bash" || block["id"] == "" {
		t.Fatalf("block %v (events %s)", block, names(evs))
	}
	delta := evs[2].Data["delta"].(map[string]any)
	var input map[string]string
	if err := json.Unmarshal([]byte(delta["partial_json"].(string)), &input); err != nil {
		t.Fatal(err)
	}
	if input["command"] != "touch x" || input["description"] != "make x" {
		t.Errorf("input %v", input)
	}
	if stop := evs[4].Data["delta"].(map[string]any)["stop_reason"]; stop != "tool_use" {
		t.Errorf("stop reason %v", stop)
	}
	follow := `{"model":"claude-sonnet-4-6","stream":true,"tools":[{}],"messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"` + block["id"].(string) + `","name":"Bash","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + block["id"].(string) + `","content":[{"type":"text","text":"ok"}]}]}]}`
	readEvents(t, post(t, context.Background(), s, follow))
	reqs := s.Requests()
	if len(reqs) != 2 || len(reqs[1].ToolResults) != 1 || reqs[1].ToolResults[0].Content != "ok" || reqs[1].ToolResults[0].ToolUseID != block["id"] {
		t.Errorf("recorded %+v", reqs)
	}
}

// TestSideRequestsDoNotUseTheScript proves that requests without tools and
// non-streaming requests without a script get the default text, the
// latter as one JSON message.
func TestSideRequestsDoNotUseTheScript(t *testing.T) {
	s := start(t)
	s.Enqueue(Text("scripted"))
	resp := post(t, context.Background(), s, `{"model":"claude-haiku-4-5","max_tokens":1,"messages":[{"role":"user","content":"quota"}]}`)
	var msg map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	content := msg["content"].([]any)[0].(map[string]any)
	if msg["type"] != "message" || content["text"] != DefaultText || msg["stop_reason"] != "end_turn" {
		t.Errorf("non-streaming answer %v", msg)
	}
	if s.Pending() != 1 {
		t.Fatal("a request without tools used the script")
	}
}

// TestHangEndsWhenTheClientLeaves proves that a hang sends message_start,
// then nothing, and that the handler ends (recording ClientGone) as soon
// as the client disconnects.
func TestHangEndsWhenTheClientLeaves(t *testing.T) {
	s := start(t)
	s.Enqueue(Hang())
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, s, mainRequest)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: message_start\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	err = s.Wait(wctx, func(rs []Request) bool { return len(rs) == 1 && !rs[0].End.IsZero() })
	if err != nil {
		t.Fatalf("hang did not end after the client left: %v", err)
	}
	if r := s.Requests()[0]; !r.ClientGone || r.Served != "hang" {
		t.Errorf("recorded %+v", r)
	}
}

// TestCloseEndsOpenStreams proves that Close returns promptly while a hang
// and a slow reply are streaming.
func TestCloseEndsOpenStreams(t *testing.T) {
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Enqueue(Hang(), Text("a").Slow(time.Hour))
	for range 2 {
		resp := post(t, context.Background(), s, mainRequest)
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on open streams")
	}
}

// TestOtherEndpoints proves the answers to HEAD /, count_tokens, the
// models list and an unknown path, all recorded.
func TestOtherEndpoints(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	if r := do(t, ctx, http.MethodHead, s.URL()+"/", ""); r.StatusCode != http.StatusOK {
		t.Errorf("HEAD / = %d", r.StatusCode)
	}
	r := do(t, ctx, http.MethodPost, s.URL()+"/v1/messages/count_tokens?beta=true", `{"messages":[]}`)
	var count map[string]any
	if err := json.NewDecoder(r.Body).Decode(&count); err != nil || count["input_tokens"] == nil {
		t.Errorf("count_tokens = %v, %v", count, err)
	}
	if r := do(t, ctx, http.MethodGet, s.URL()+"/v1/models", ""); r.StatusCode != http.StatusOK {
		t.Errorf("models = %d", r.StatusCode)
	}
	if r := do(t, ctx, http.MethodPost, s.URL()+"/api/event_logging/batch", "{}"); r.StatusCode != http.StatusNotFound {
		t.Errorf("unknown path = %d", r.StatusCode)
	}
	var served []string
	for _, q := range s.Requests() {
		served = append(served, q.Served)
	}
	if strings.Join(served, ",") != "head,count_tokens,models,not_found" {
		t.Errorf("served %v", served)
	}
}
