package fakeopenai

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

func post(t *testing.T, ctx context.Context, s *Server, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+"/responses", strings.NewReader(body))
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

const mainRequest = `{"model":"gpt-fake","stream":true,"tools":[{"type":"function","name":"exec_command"}],"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}]}`

// TestTextIsStreamedAsResponsesEvents proves the event sequence a text
// reply produces: created, the message item, one delta per chunk, the
// done item carrying the whole text, and completed with an id and usage.
func TestTextIsStreamedAsResponsesEvents(t *testing.T) {
	s := start(t)
	s.Enqueue(Text("Hel", "lo"))
	evs := readEvents(t, post(t, context.Background(), s, mainRequest))
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done " +
		"response.output_item.done response.completed"
	if got := names(evs); got != want {
		t.Fatalf("events:\n got %s\nwant %s", got, want)
	}
	if evs[4].Data["delta"] != "Hel" || evs[5].Data["delta"] != "lo" {
		t.Errorf("deltas %v %v", evs[4].Data["delta"], evs[5].Data["delta"])
	}
	item := evs[8].Data["item"].(map[string]any)
	content := item["content"].([]any)[0].(map[string]any)
	if item["type"] != "message" || item["role"] != "assistant" || content["text"] != "Hello" {
		t.Errorf("done item %v", item)
	}
	resp := evs[9].Data["response"].(map[string]any)
	usage, _ := resp["usage"].(map[string]any)
	if resp["id"] == "" || usage["total_tokens"] == nil {
		t.Errorf("completed response %v", resp)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || !reqs[0].Scripted || reqs[0].Served != "text" || reqs[0].Model != "gpt-fake" || reqs[0].Tools != 1 || reqs[0].End.IsZero() {
		t.Errorf("recorded %+v", reqs)
	}
}

// TestFunctionCallThenOutputIsRecorded proves that ExecCommand streams a
// function_call item for exec_command with escalated sandbox permissions,
// and that the function_call_output of the next request is recorded.
func TestFunctionCallThenOutputIsRecorded(t *testing.T) {
	s := start(t)
	s.Enqueue(ExecCommand("touch x", "because"), Text("done"))
	evs := readEvents(t, post(t, context.Background(), s, mainRequest))
	var item map[string]any
	for _, e := range evs {
		if e.Name == "response.output_item.done" {
			item = e.Data["item"].(map[string]any)
		}
	}
	if item == nil || item["type"] != "function_call" || item["name"] != "exec_command" || item["call_id"] == "" {
		t.Fatalf("function call item %v (events %s)", item, names(evs))
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(item["arguments"].(string)), &args); err != nil {
		t.Fatal(err)
	}
	if args["cmd"] != "touch x" || args["sandbox_permissions"] != "require_escalated" || args["justification"] != "because" {
		t.Errorf("arguments %v", args)
	}
	follow := `{"model":"gpt-fake","tools":[{}],"input":[{"type":"function_call","call_id":"` + item["call_id"].(string) + `"},` +
		`{"type":"function_call_output","call_id":"` + item["call_id"].(string) + `","output":"Process exited with code 0"}]}`
	readEvents(t, post(t, context.Background(), s, follow))
	reqs := s.Requests()
	if len(reqs) != 2 || len(reqs[1].ToolOutputs) != 1 || reqs[1].ToolOutputs[0].Output != "Process exited with code 0" || reqs[1].Served != "text" {
		t.Errorf("recorded %+v", reqs)
	}
}

// TestSideRequestsDoNotUseTheScript proves that requests without tools and
// requests that find the queue empty get the default text.
func TestSideRequestsDoNotUseTheScript(t *testing.T) {
	s := start(t)
	s.Enqueue(Text("scripted"))
	readEvents(t, post(t, context.Background(), s, `{"model":"small","input":"title please"}`))
	if s.Pending() != 1 {
		t.Fatalf("a request without tools used the script")
	}
	readEvents(t, post(t, context.Background(), s, mainRequest))
	evs := readEvents(t, post(t, context.Background(), s, mainRequest))
	if evs[4].Data["delta"] != DefaultText {
		t.Errorf("empty queue answered %v", evs[4].Data)
	}
	var served []string
	for _, r := range s.Requests() {
		served = append(served, r.Served)
	}
	if strings.Join(served, ",") != "default,text,default" {
		t.Errorf("served %v", served)
	}
}

// TestHangEndsWhenTheClientLeaves proves that a hang sends
// response.created, then nothing, and that the handler ends (recording
// ClientGone) as soon as the client disconnects.
func TestHangEndsWhenTheClientLeaves(t *testing.T) {
	s := start(t)
	s.Enqueue(Hang())
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, s, mainRequest)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "event: response.created\n" {
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

// TestSlowReplyAndCloseAreAbortable proves that a slow reply's pauses end
// when the server closes, so Close returns promptly with a stream open.
func TestSlowReplyAndCloseAreAbortable(t *testing.T) {
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Enqueue(Text("a", "b").Slow(time.Hour))
	resp := post(t, context.Background(), s, mainRequest)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on an open slow stream")
	}
	s.Close()
}

// TestUnknownPathIsRecorded proves that other endpoints get a 404 and are
// recorded.
func TestUnknownPathIsRecorded(t *testing.T) {
	s := start(t)
	resp, err := client(t).Get(s.URL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d", resp.StatusCode)
	}
	if r := s.Requests(); len(r) != 1 || r[0].Path != "/v1/models" || r[0].Served != "not_found" {
		t.Errorf("recorded %+v", r)
	}
}

// TestStatusReply proves a scripted HTTP error.
func TestStatusReply(t *testing.T) {
	s := start(t)
	s.Enqueue(Status(http.StatusTooManyRequests))
	resp := post(t, context.Background(), s, mainRequest)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status %d", resp.StatusCode)
	}
}
