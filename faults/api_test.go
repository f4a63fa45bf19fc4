package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// The tokens of the API's tests: ci may use the World's channel and
// answer permission requests; viewer may use it but not answer; other
// may use another channel only.
const (
	ciToken     = "ci-token-0123456789abcdef"
	viewerToken = "viewer-token-0123456789abcdef"
	otherToken  = "other-token-0123456789abcdef"
)

// withAPI is a setup with the API on a free port and the three tokens.
func withAPI(conf settings) setup {
	return setup{conf: settings{"api.listen": "127.0.0.1:0"}.With(conf)}
}

// apiTokens are the [[api.tokens]] tables of the API's tests.
func apiTokens(channel string) string {
	return fmt.Sprintf(`
[[api.tokens]]
name = "ci"
token = %q
channels = [%q]
agents = ["default"]
may_approve = true

[[api.tokens]]
name = "viewer"
token = %q
channels = ["discord:%s"]

[[api.tokens]]
name = "other"
token = %q
channels = ["999"]
`, ciToken, channel, viewerToken, channel, otherToken)
}

// client is a real HTTP client of a broker's API, with a token.
type client struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

func (b *broker) client(token string) *client {
	b.t.Helper()
	if b.APIAddr() == "" {
		b.t.Fatal("the broker serves no API")
	}
	return &client{t: b.t, base: "http://" + b.APIAddr(), token: token, http: &http.Client{Timeout: 30 * time.Second}}
}

// do sends a request and returns the status and the body, decoded into
// out when it is JSON and out is not nil.
func (c *client) do(method, path string, body any, out any, header ...string) (int, string) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		json.Unmarshal(raw, out)
	}
	return resp.StatusCode, string(raw)
}

// started is POST /v1/prompts's answer.
type started struct {
	ID, State, Platform, Channel, Thread, Link, Events string
}

// promptView is GET /v1/prompts/{id}'s answer, as far as the tests read
// it.
type promptView struct {
	ID, State, Thread, Link, Error, Summary, Answer string
	StopReason                                      string `json:"stop_reason"`
	Permissions                                     []struct {
		Request string
		Options []struct{ ID string }
	}
}

// start posts a prompt and checks it is accepted.
func (c *client) start(body map[string]any, header ...string) started {
	c.t.Helper()
	var s started
	if code, raw := c.do("POST", "/v1/prompts", body, &s, header...); code != http.StatusAccepted {
		c.t.Fatalf("POST /v1/prompts %v: %d %s", body, code, raw)
	}
	return s
}

// get reads a prompt.
func (c *client) get(id string) promptView {
	c.t.Helper()
	var v promptView
	if code, raw := c.do("GET", "/v1/prompts/"+id, nil, &v); code != http.StatusOK {
		c.t.Fatalf("GET /v1/prompts/%s: %d %s", id, code, raw)
	}
	return v
}

// sse is one Server-Sent Event as read.
type sse struct {
	ID   string
	Type string
	Data string
}

// stream reads a prompt's events after lastID ("" from the start) until
// the stream closes or stop says so (stop may be nil); it returns what it
// read.
func (c *client) stream(ctx context.Context, id, lastID string, stop func(sse) bool) ([]sse, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/prompts/"+id+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		raw, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("events: %d %s", resp.StatusCode, raw)
	}
	var out []sse
	var cur sse
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Type != "" {
				out = append(out, cur)
				if stop != nil && stop(cur) {
					return out, nil
				}
			}
			cur = sse{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.Type = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out, sc.Err()
}

// events reads a prompt's whole stream, to its end.
func (c *client) events(id string) []sse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	evs, err := c.stream(ctx, id, "", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != "end" {
		c.t.Fatalf("the stream did not end with an end event: %+v", evs)
	}
	return evs
}

// chunks joins the chunk events' texts.
func chunks(evs []sse) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "chunk" {
			var d struct{ Text string }
			json.Unmarshal([]byte(e.Data), &d)
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

// endOf decodes a stream's end event.
func endOf(t *testing.T, evs []sse) (end struct {
	State, Error, Summary string
	StopReason            string `json:"stop_reason"`
}) {
	t.Helper()
	if len(evs) == 0 || evs[len(evs)-1].Type != "end" {
		t.Fatalf("no end event: %+v", evs)
	}
	json.Unmarshal([]byte(evs[len(evs)-1].Data), &end)
	return end
}

// apiWorld is a World with the API and its tokens, and its broker.
func apiWorld(t *testing.T, conf settings) (*world, *broker) {
	t.Helper()
	w := newWorld(t, withAPI(conf))
	w.Raw = apiTokens(w.Channel)
	return w, w.start()
}

// A prompt through the API opens a thread in the channel, shown there
// like any other (the bot's message says who asked and what, and gets
// the turn's status marks; the answer streams into the thread); the
// POST answers 202 with the prompt's id and a link to it; the event
// stream carries the turn from its first chunk to its end; GET gives
// the state, the outcome and the final answer.
func TestAPI_APromptRunsInAThreadOfTheChat(t *testing.T) {
	w, b := apiWorld(t, nil)
	c := b.client(ciToken)
	s := c.start(map[string]any{"channel": w.Channel, "text": "stream 5 50ms"})
	if !strings.HasPrefix(s.ID, "p-") || s.Thread == "" || s.Platform != "discord" || s.Channel != w.Channel ||
		s.Link != fmt.Sprintf("https://discord.com/channels/%s/%s/%s", brokertest.GuildID, w.Channel, s.Thread) || s.Events != "/v1/prompts/"+s.ID+"/events" {
		t.Errorf("202 answered %+v", s)
	}
	ch, ok := w.Srv.Channel(s.Thread)
	if !ok || !ch.IsThread() || ch.ParentID != w.Channel {
		t.Fatalf("thread %s: %+v", s.Thread, ch)
	}
	opener, _ := w.Srv.Message(w.Channel, s.Thread)
	if opener.Author.ID != w.Srv.Bot().ID || !strings.Contains(opener.Content, "**ci** (through the API)") || !strings.Contains(opener.Content, "stream 5 50ms") {
		t.Errorf("the message the thread opened from: %q by %s", opener.Content, opener.Author.ID)
	}
	evs := c.events(s.ID)
	if got := chunks(evs); got != "chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\n" {
		t.Errorf("the stream's chunks: %q", got)
	}
	if end := endOf(t, evs); end.State != "done" || end.StopReason != "end_turn" {
		t.Errorf("end: %+v", end)
	}
	for i, e := range evs {
		if e.ID != fmt.Sprint(i+1) {
			t.Fatalf("event %d has id %q: ids count from 1 without a gap", i, e.ID)
		}
	}
	answers := w.awaitAnswers(s.Thread, 1)
	if !strings.Contains(answers[0].Text, "chunk 5") || !strings.HasPrefix(answers[0].Footer, "-# ✅") {
		t.Errorf("the thread shows %q", answers[0].Text)
	}
	w.awaitReaction(w.Channel, s.Thread, brokertest.Done)
	v := c.get(s.ID)
	if v.State != "done" || v.Answer != "chunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\n" || v.Thread != s.Thread || v.Summary != "done" {
		t.Errorf("GET: %+v", v)
	}

	// A second prompt in the same thread is its next turn, in the same
	// agent session.
	// Its attachment is inlined as a chat inlines a text file.
	s2 := c.start(map[string]any{"thread": s.Thread, "text": "hello again",
		"attachments": []map[string]string{{"name": "notes.txt", "content": "line one\nline two\n"}}})
	if s2.Thread != s.Thread {
		t.Errorf("the follow-up ran in %s, not %s", s2.Thread, s.Thread)
	}
	if end := endOf(t, c.events(s2.ID)); end.State != "done" {
		t.Errorf("the follow-up ended %+v", end)
	}
	if v := c.get(s2.ID); !strings.Contains(v.Answer, "hello again\nAttached file notes.txt:\n```\nline one\nline two\n```") {
		t.Errorf("the agent was given %q", v.Answer)
	}
	w.awaitAnswers(s.Thread, 2)
}

// A client that loses its event stream and reconnects with the last id
// it read misses nothing: the two streams together are every event, in
// order, once.
func TestAPI_EventStreamResumesWithLastEventID(t *testing.T) {
	w, b := apiWorld(t, nil)
	c := b.client(ciToken)
	s := c.start(map[string]any{"channel": w.Channel, "text": "stream 30 40ms"})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	first, err := c.stream(ctx, s.ID, "", func(e sse) bool { return e.Type == "chunk" && strings.Contains(e.Data, "chunk 8") })
	if err != nil {
		t.Fatal(err)
	}
	last := first[len(first)-1].ID
	time.Sleep(300 * time.Millisecond) // events go on meanwhile
	rest, err := c.stream(ctx, s.ID, last, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := append(first, rest...)
	for i, e := range all {
		if e.ID != fmt.Sprint(i+1) {
			t.Fatalf("event %d of the two streams has id %s: %+v", i, e.ID, all)
		}
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "chunk %d\n", i)
	}
	if got := chunks(all); got != want.String() {
		t.Errorf("the chunks of both streams:\n%s", got)
	}
	if endOf(t, all).State != "done" {
		t.Errorf("ended %+v", endOf(t, all))
	}
}

// A cancel through the API reaches the agent: the turn ends cancelled
// (by the client, as the thread says), and a second cancel, once it has
// ended, is refused with 409.
func TestAPI_CancelReachesTheAgent(t *testing.T) {
	w, b := apiWorld(t, nil)
	c := b.client(ciToken)
	s := c.start(map[string]any{"channel": w.Channel, "text": "hang"})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := c.stream(ctx, s.ID, "", func(e sse) bool { return e.Type == "chunk" }); err != nil {
		t.Fatal(err)
	}
	// A prompt queued behind it is cancelled without touching the turn
	// that runs: it ends cancelled once its turn would begin.
	queued := c.start(map[string]any{"thread": s.Thread, "text": "stream 1"})
	if queued.State != "queued" {
		t.Errorf("the second prompt is %s", queued.State)
	}
	if code, raw := c.do("POST", "/v1/prompts/"+queued.ID+"/cancel", nil, nil); code != http.StatusAccepted {
		t.Fatalf("cancel while queued: %d %s", code, raw)
	}
	time.Sleep(500 * time.Millisecond)
	if v := c.get(s.ID); v.State != "running" {
		t.Fatalf("cancelling the queued prompt ended the running one: %+v", v)
	}
	asked := time.Now()
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/cancel", nil, nil); code != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", code, raw)
	}
	end := endOf(t, c.events(s.ID))
	if end.State != "cancelled" || !strings.Contains(end.Error, "cancelled by ci (through the API)") {
		t.Errorf("end: %+v", end)
	}
	within(t, "from the cancel to the end", time.Since(asked), 0, 5*time.Second)
	got := w.awaitAnswers(s.Thread, 1)[0]
	if !strings.Contains(got.Footer, "cancelled by ci (through the API)") {
		t.Errorf("the thread says %q", got.Footer)
	}
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/cancel", nil, nil); code != http.StatusConflict || !strings.Contains(raw, "has ended: cancelled") {
		t.Errorf("a cancel after the end: %d %s", code, raw)
	}
	if end := endOf(t, c.events(queued.ID)); end.State != "cancelled" {
		t.Errorf("the queued prompt ended %+v", end)
	}
}

// A permission request of an API prompt is an event, and an open
// request of the prompt; answered through the API it reaches the agent,
// and the thread's request says who chose what. One answered in the
// chat first is refused through the API with who answered, and the
// event stream tells the API's client.
func TestAPI_PermissionThroughTheAPIAndTheChat(t *testing.T) {
	w, b := apiWorld(t, settings{"discord.approvers": []string{alice.ID}})
	c := b.client(ciToken)
	s := c.start(map[string]any{"channel": w.Channel, "text": "permission"})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	evs, err := c.stream(ctx, s.ID, "", func(e sse) bool { return e.Type == "permission_asked" })
	if err != nil {
		t.Fatal(err)
	}
	var asked struct {
		Request  string
		ToolCall struct{ Title string } `json:"tool_call"`
		Options  []struct{ ID, Kind string }
	}
	json.Unmarshal([]byte(evs[len(evs)-1].Data), &asked)
	if asked.Request == "" || asked.ToolCall.Title != "Run rm -rf build" || len(asked.Options) != 3 {
		t.Fatalf("permission_asked: %s", evs[len(evs)-1].Data)
	}
	if v := c.get(s.ID); v.State != "waiting_for_permission" || len(v.Permissions) != 1 || v.Permissions[0].Request != asked.Request {
		t.Errorf("GET while asked: %+v", v)
	}
	msg := w.permissionRequest(s.Thread)

	// A token without may_approve, a request that is not one, an option
	// that is not one: refused, the request still open.
	if code, raw := b.client(viewerToken).do("POST", "/v1/prompts/"+s.ID+"/permission", map[string]string{"request": asked.Request, "option": "allow"}, nil); code != http.StatusNotFound && code != http.StatusForbidden {
		t.Errorf("viewer's answer: %d %s", code, raw)
	}
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/permission", map[string]string{"request": "perm-99", "option": "allow"}, nil); code != http.StatusNotFound {
		t.Errorf("no such request: %d %s", code, raw)
	}
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/permission", map[string]string{"request": asked.Request, "option": "maybe"}, nil); code != http.StatusBadRequest || !strings.Contains(raw, `"field":"option"`) {
		t.Errorf("no such option: %d %s", code, raw)
	}
	var ans struct{ Request, Option, By, Via string }
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/permission", map[string]string{"request": asked.Request, "option": "allow"}, &ans); code != http.StatusOK || ans.Via != "api" {
		t.Fatalf("the API's answer: %d %s", code, raw)
	}
	rest := c.events(s.ID)
	if !strings.Contains(chunks(rest), "permission granted") {
		t.Errorf("the agent was not told allow: %q", chunks(rest))
	}
	var answered PermissionAnsweredEvent
	for _, e := range rest {
		if e.Type == "permission_answered" {
			json.Unmarshal([]byte(e.Data), &answered)
		}
	}
	if answered.Via != "api" || answered.Option != "allow" || answered.By != "ci" {
		t.Errorf("permission_answered: %+v", answered)
	}
	w.Srv.Await("the chat's request says the API chose", func() bool {
		m, _ := w.Srv.Message(s.Thread, msg.ID)
		return strings.Contains(m.Content, "chose **Allow") && strings.Contains(m.Content, "through the API") && len(m.Buttons()) == 0
	})
	if code, raw := c.do("POST", "/v1/prompts/"+s.ID+"/permission", map[string]string{"request": asked.Request, "option": "reject"}, nil); code != http.StatusConflict {
		t.Errorf("a second answer: %d %s", code, raw)
	}

	// In the chat first.
	s2 := c.start(map[string]any{"thread": s.Thread, "text": "permission"})
	msg2 := w.permissionRequest(s.Thread, msg.ID)
	allow, _ := brokertest.Button(msg2, "Allow")
	w.response(w.Srv.ClickButton(s.Thread, msg2.ID, alice.ID, allow))
	evs2 := c.events(s2.ID)
	var req2 string
	for _, e := range evs2 {
		if e.Type == "permission_answered" {
			json.Unmarshal([]byte(e.Data), &answered)
		}
		if e.Type == "permission_asked" {
			var a struct{ Request string }
			json.Unmarshal([]byte(e.Data), &a)
			req2 = a.Request
		}
	}
	if answered.Via != "chat" || answered.By != "alice" || answered.Option != "allow" {
		t.Errorf("permission_answered after the chat's click: %+v", answered)
	}
	code, raw := c.do("POST", "/v1/prompts/"+s2.ID+"/permission", map[string]string{"request": req2, "option": "reject"}, nil)
	if code != http.StatusConflict && !(code == http.StatusConflict || strings.Contains(raw, "has ended")) {
		t.Errorf("an answer after the chat's: %d %s", code, raw)
	}
	if !strings.Contains(raw, "answered first in the chat, by alice") && !strings.Contains(raw, "has ended") {
		t.Errorf("the refusal does not say who answered: %s", raw)
	}
}

// PermissionAnsweredEvent is a permission_answered event's data.
type PermissionAnsweredEvent struct{ Request, Option, By, Via string }

// Bad input gets a clear JSON answer with the right status, the field
// named where there is one, and nothing is started: no thread is opened,
// no message posted.
func TestAPI_RefusalsStartNothing(t *testing.T) {
	w, b := apiWorld(t, settings{"api.max_body_bytes": 2048, "discord.max_text_bytes": 100, "api.rate_limit": 30})
	c := b.client(ciToken)
	before := len(w.Srv.Messages(w.Channel))
	big := strings.Repeat("a", 3000)
	for _, tc := range []struct {
		name   string
		c      *client
		body   any
		status int
		want   string
	}{
		{"no text", c, map[string]any{"channel": w.Channel}, 400, `"field":"text"`},
		{"no place", c, map[string]any{"text": "hi"}, 400, `"field":"channel"`},
		{"both places", c, map[string]any{"text": "hi", "channel": w.Channel, "thread": "1"}, 400, `"field":"thread"`},
		{"unknown field", c, map[string]any{"text": "hi", "channel": w.Channel, "colour": "red"}, 400, `"field":"colour"`},
		{"wrong type", c, `{"text": 5, "channel": "1"}`, 400, `"field":"text"`},
		{"not JSON", c, `hello`, 400, "not a JSON object"},
		{"no such platform", c, map[string]any{"text": "hi", "channel": w.Channel, "platform": "slack"}, 400, `"field":"platform"`},
		{"no such agent", c, map[string]any{"text": "hi", "channel": w.Channel, "agent": "nope"}, 400, `"field":"agent"`},
		{"no token", b.client(""), map[string]any{"text": "hi", "channel": w.Channel}, 401, "no bearer token"},
		{"wrong token", b.client("not-a-token-of-the-broker"), map[string]any{"text": "hi", "channel": w.Channel}, 401, "not one of the broker's"},
		{"channel not the token's", b.client(otherToken), map[string]any{"text": "hi", "channel": w.Channel}, 403, `"field":"channel"`},
		{"channel not served", b.client(ciToken), map[string]any{"text": "hi", "channel": "555"}, 403, "channel"},
		{"agent not the token's", b.client(viewerToken), map[string]any{"text": "hi", "channel": w.Channel, "agent": "default"}, 403, `"field":"agent"`},
		{"no such thread", c, map[string]any{"text": "hi", "thread": "424242"}, 404, `"field":"thread"`},
		{"body too big", c, map[string]any{"text": big, "channel": w.Channel}, 413, "api.max_body_bytes"},
		{"attachment too big", c, map[string]any{"text": "hi", "channel": w.Channel, "attachments": []map[string]string{{"name": "a.txt", "content": strings.Repeat("b", 101)}}}, 413, `"field":"attachments[0].content"`},
	} {
		code, raw := tc.c.do("POST", "/v1/prompts", tc.body, nil)
		var e struct{ Error string }
		if code != tc.status || !strings.Contains(raw, tc.want) || json.Unmarshal([]byte(raw), &e) != nil || e.Error == "" {
			t.Errorf("%s: %d %s, want %d with %s", tc.name, code, raw, tc.status, tc.want)
		}
	}
	for _, tc := range []struct {
		path, method string
		status       int
	}{
		{"/v1/prompts/p-nope", "GET", 404},
		{"/v1/prompts/p-nope/events", "GET", 404},
		{"/v1/prompts/p-nope/cancel", "POST", 404},
		{"/v1/nothing", "GET", 404},
	} {
		if code, raw := c.do(tc.method, tc.path, nil, nil); code != tc.status || !strings.Contains(raw, `"error"`) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, code, raw)
		}
	}
	// The OpenAPI document is served to anyone.
	var doc struct{ OpenAPI string }
	if code, raw := b.client("").do("GET", "/v1/openapi.json", nil, &doc); code != 200 || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("/v1/openapi.json: %d %.200s", code, raw)
	}
	// Another token's prompt is not found.
	s := c.start(map[string]any{"channel": w.Channel, "text": "hi"})
	if code, _ := b.client(viewerToken).do("GET", "/v1/prompts/"+s.ID, nil, nil); code != 404 {
		t.Errorf("viewer read ci's prompt: %d", code)
	}
	c.events(s.ID)
	if n := len(w.Srv.Messages(w.Channel)); n != before+1 {
		t.Errorf("%d messages in the channel after the refusals and one prompt, want %d", n, before+1)
	}

	// Past the rate limit: 429 with Retry-After; another token is not
	// held back by it.
	var limited *http.Response
	for i := 0; i < 40 && limited == nil; i++ {
		req, _ := http.NewRequest("GET", c.base+"/v1/prompts/"+s.ID, nil)
		req.Header.Set("Authorization", "Bearer "+ciToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp
		}
	}
	if limited == nil || limited.Header.Get("Retry-After") == "" {
		t.Fatalf("no 429 with Retry-After within 40 requests at 30 a minute: %+v", limited)
	}
	if code, _ := b.client(viewerToken).do("GET", "/v1/prompts/p-nope", nil, nil); code != 404 {
		t.Errorf("another token after ci's limit: %d", code)
	}
	// Every answer is counted by its status.
	for code, least := range map[string]float64{"202": 1, "400": 8, "401": 2, "403": 3, "404": 5, "413": 2, "429": 1} {
		b.awaitMetric(`acp_broker_api_requests_total{code="`+code+`"}`, func(v float64) bool { return v >= least })
	}
	b.awaitMetric("acp_broker_api_prompts_running", func(v float64) bool { return v == 0 })
}

// A POST retried with the same Idempotency-Key starts one turn: the
// retries, even at once, answer with the same prompt; the same key with
// another body is refused.
func TestAPI_IdempotentRetryStartsOneTurn(t *testing.T) {
	w, b := apiWorld(t, nil)
	c := b.client(ciToken)
	body := map[string]any{"channel": w.Channel, "text": "slow 500ms 2"}
	var wg sync.WaitGroup
	ids := make([]string, 4)
	for i := range ids {
		wg.Go(func() {
			var s started
			if code, raw := c.do("POST", "/v1/prompts", body, &s, "Idempotency-Key", "deploy-42"); code != http.StatusAccepted {
				t.Errorf("retry %d: %d %s", i, code, raw)
			}
			ids[i] = s.ID
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] || id == "" {
			t.Fatalf("the retries started %v", ids)
		}
	}
	c.events(ids[0])
	if code, raw := c.do("POST", "/v1/prompts", map[string]any{"channel": w.Channel, "text": "other"}, nil, "Idempotency-Key", "deploy-42"); code != http.StatusUnprocessableEntity {
		t.Errorf("the key with another body: %d %s", code, raw)
	}
	threads := 0
	for _, ch := range w.Srv.Threads() {
		if ch.ParentID == w.Channel {
			threads++
		}
	}
	if threads != 1 {
		t.Errorf("%d threads opened, want 1", threads)
	}
	if n := b.awaitMetric(`acp_broker_turns_total{outcome="done"}`, func(v float64) bool { return v >= 1 }); n != 1 {
		t.Errorf("%v turns done, want 1", n)
	}
}

// With chat.platform = "none" the broker serves the API alone: a prompt
// runs in a thread of the API's own, streams, ends, and its thread takes
// a follow-up in the same session.
func TestAPI_WithoutAChat(t *testing.T) {
	w := newWorld(t, withAPI(settings{"chat.platform": "none", "discord.token": nil, "discord.api_url": nil, "discord.allowed_channels": nil}))
	w.Raw = `
[[api.tokens]]
name = "ci"
token = "` + ciToken + `"
may_approve = true
`
	b := w.start()
	c := b.client(ciToken)
	s := c.start(map[string]any{"text": "stream 3 20ms"})
	if s.Platform != "" || !strings.HasPrefix(s.Thread, "t-") {
		t.Errorf("started %+v", s)
	}
	evs := c.events(s.ID)
	if chunks(evs) != "chunk 1\nchunk 2\nchunk 3\n" || endOf(t, evs).State != "done" {
		t.Errorf("events: %+v", evs)
	}
	s2 := c.start(map[string]any{"thread": s.Thread, "text": "permission"})
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if _, err := c.stream(ctx, s2.ID, "", func(e sse) bool { return e.Type == "permission_asked" }); err != nil {
		t.Fatal(err)
	}
	if code, raw := c.do("POST", "/v1/prompts/"+s2.ID+"/permission", map[string]string{"request": "perm-1", "option": "reject"}, nil); code != http.StatusOK {
		t.Fatalf("answer: %d %s", code, raw)
	}
	if got := chunks(c.events(s2.ID)); !strings.Contains(got, "permission denied") {
		t.Errorf("after reject: %q", got)
	}
	if v := c.get(s2.ID); v.State != "done" || v.Thread != s.Thread {
		t.Errorf("GET: %+v", v)
	}
	if n := len(w.Srv.Requests()); n != 0 {
		t.Errorf("the broker made %d requests to the (fake) Discord with no chat", n)
	}
	// The audit names the token that answered.
	out, err := exec.Command(w.Bins.Broker, "audit", "--json", "--since", "1h", "--config", w.writeConfig()).Output()
	if err != nil {
		t.Fatalf("broker audit --json: %v", err)
	}
	var decided []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var d struct {
			Thread, Via, By string
			ByName          string `json:"by_name"`
			OptionID        string `json:"option_id"`
		}
		json.Unmarshal([]byte(line), &d)
		if strings.HasSuffix(d.Thread, s.Thread) {
			decided = append(decided, d.Via+" "+d.By+" "+d.ByName+" "+d.OptionID)
		}
	}
	if len(decided) != 1 || decided[0] != "user api:ci ci reject" {
		t.Errorf("the audit of the thread: %q, want the token's answer (user api:ci ci reject)\n%s", decided, out)
	}
}

// A reload adds, changes and removes tokens: a removed token is refused
// from then on, a new one taken. No token, right or wrong, is ever in
// the broker's log.
func TestAPI_TokensReloadAndAreNeverLogged(t *testing.T) {
	w, b := apiWorld(t, nil)
	c := b.client(ciToken)
	wrong := "wrong-token-for-the-log-0123456789"
	if code, _ := b.client(wrong).do("GET", "/v1/prompts/p-x", nil, nil); code != 401 {
		t.Errorf("a wrong token: %d", code)
	}
	s := c.start(map[string]any{"channel": w.Channel, "text": "hello"})
	c.events(s.ID)

	const fresh = "fresh-token-0123456789abcdef"
	w.Raw = `
[[api.tokens]]
name = "fresh"
token = "` + fresh + `"
channels = ["*"]
`
	w.writeConfig()
	b.Signal(syscall.SIGHUP)
	brokertest.Must(t, patience, func(ctx context.Context) error {
		_, err := b.Log.Await(ctx, "configuration reloaded")
		return err
	})
	if code, raw := c.do("GET", "/v1/prompts/"+s.ID, nil, nil); code != 401 {
		t.Errorf("a removed token: %d %s", code, raw)
	}
	f := b.client(fresh)
	s2 := f.start(map[string]any{"channel": w.Channel, "text": "hello"})
	if end := endOf(t, f.events(s2.ID)); end.State != "done" {
		t.Errorf("the new token's prompt: %+v", end)
	}
	b.stop()
	raw, err := os.ReadFile(b.Log.Path())
	if err != nil {
		t.Fatal(err)
	}
	log := string(raw)
	for _, tok := range []string{ciToken, viewerToken, otherToken, fresh, wrong} {
		if strings.Contains(log, tok) {
			t.Errorf("the log holds a token: %s", tok)
		}
	}
	if !strings.Contains(log, `"token":"ci"`) {
		t.Error("the log does not name the token that started a prompt")
	}
}
