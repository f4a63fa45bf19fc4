package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/store"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore keeps prompts' records in memory (not their answers, so that
// what the Server keeps is what a test measures).
type memStore struct {
	mu      sync.Mutex
	prompts map[string]store.Prompt
}

func (m *memStore) PutPrompt(p store.Prompt, answer *string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prompts[p.ID] = p
}

func (m *memStore) Prompt(id string) (store.Prompt, string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.prompts[id]
	return p, "", ok, nil
}

func (m *memStore) Prompts() ([]store.Prompt, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Values(m.prompts)), nil
}

// engine is a turn engine that runs nothing: the test plays each
// submitted prompt's turn on its Sink.
type engine struct {
	submitted chan *adapter.Prompt

	mu        sync.Mutex
	cancelled []string // the threads whose turn Cancel was asked to end
}

func (e *engine) Submit(thread string, p *adapter.Prompt) error {
	e.submitted <- p
	return nil
}

func (e *engine) Cancel(thread string, _ error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancelled = append(e.cancelled, thread)
	return false
}

// cancels are the threads whose turn Cancel was asked to end.
func (e *engine) cancels() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.cancelled)
}

const testToken = "test-token-0123456789abcdef"

// testConfig is the Config of a Server of headless threads of h, with
// one token ("ci").
func testConfig(h *Headless) Config {
	return Config{
		Tokens:       []config.APIToken{{Name: "ci", Token: testToken, Channels: []string{"*"}}},
		RateLimit:    10000,
		MaxBodyBytes: 1 << 20,
		MaxTextBytes: 1 << 20,
		Fronts:       map[string]Front{HeadlessPlatform: h},
		Default:      HeadlessPlatform,
		Profile:      func(string) bool { return true },
		Store:        &memStore{prompts: map[string]store.Prompt{}},
		Logger:       zerolog.Nop(),
	}
}

// testAPI is a Server of headless threads on 127.0.0.1, with one token
// ("ci"); tune changes its Config before Listen.
type testAPI struct {
	*Server
	t      *testing.T
	engine *engine
	base   string
}

func listen(t *testing.T, tune func(*Config)) *testAPI {
	t.Helper()
	e := &engine{submitted: make(chan *adapter.Prompt, 100)}
	h := NewHeadless(e, func(string) bool { return false })
	cfg := testConfig(h)
	if tune != nil {
		tune(&cfg)
	}
	s, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.Known = s.HeadlessThread
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return &testAPI{Server: s, t: t, engine: e, base: "http://" + s.Addr()}
}

// request sends a request with token (none if "") from client.
func (a *testAPI) request(client *http.Client, method, path, token, body string) (*http.Response, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// start posts a prompt and returns its id and the prompt the engine got.
func (a *testAPI) start() (string, *adapter.Prompt) {
	a.t.Helper()
	resp, raw := a.request(http.DefaultClient, "POST", "/v1/prompts", testToken, `{"text": "hello"}`)
	if resp.StatusCode != http.StatusAccepted {
		a.t.Fatalf("POST /v1/prompts: %d %s", resp.StatusCode, raw)
	}
	var s StartResponse
	json.Unmarshal([]byte(raw), &s)
	select {
	case p := <-a.engine.submitted:
		return s.ID, p
	case <-time.After(5 * time.Second):
		a.t.Fatal("the prompt was not submitted")
		return "", nil
	}
}

// stream opens a prompt's event stream; the caller reads and closes it.
func (a *testAPI) stream(ctx context.Context, id string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", a.base+"/v1/prompts/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	return http.DefaultClient.Do(req)
}

// nextEvent reads the stream up to its next event's type and data.
func nextEvent(r *bufio.Reader) (typ, data string, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return typ, data, err
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && typ != "":
			return typ, data, nil
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

func chunk(text string) acp.Update {
	b := acp.TextBlock(text)
	return acp.Update{Kind: acp.UpdateMessageChunk, Content: &b}
}

func done(p *adapter.Prompt, text string) {
	p.Sink.Done(adapter.Outcome{StopReason: "end_turn", Text: text, TextBytes: int64(len(text)), Shown: func(string) {}})
}

// shorten sets the server's timeouts for one test.
func shorten(t *testing.T, read, write, idle time.Duration) {
	oldRH, oldR, oldW, oldI := readHeaderWait, readWait, writeWait, idleWait
	readHeaderWait, readWait, writeWait, idleWait = read, read, write, idle
	t.Cleanup(func() { readHeaderWait, readWait, writeWait, idleWait = oldRH, oldR, oldW, oldI })
}

// An event stream outlives the server's read and write timeouts, which
// bound every other request: a turn longer than them is streamed to its
// end.
func TestEvents_OutliveTheServersTimeouts(t *testing.T) {
	shorten(t, 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond)
	a := listen(t, nil)
	id, p := a.start()
	resp, err := a.stream(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	p.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
	time.Sleep(700 * time.Millisecond) // past every timeout of the server's
	p.Sink.Update(chunk("late"))
	done(p, "late")
	var types []string
	for {
		typ, data, err := nextEvent(r)
		if err != nil {
			t.Fatalf("the stream broke after %v: %v", types, err)
		}
		types = append(types, typ)
		if typ == "chunk" && !strings.Contains(data, "late") {
			t.Errorf("chunk %s", data)
		}
		if typ == "end" {
			break
		}
	}
	if !strings.Contains(strings.Join(types, " "), "chunk") {
		t.Errorf("events %v: no chunk", types)
	}
}

// A token may have api.max_streams event streams open at once: the next
// is refused with 429 in words naming the key, and one is taken again
// once another closes.
func TestEvents_CappedPerToken(t *testing.T) {
	a := listen(t, func(c *Config) { c.MaxStreams = 2 })
	id, p := a.start()
	defer done(p, "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	for range 2 {
		resp, err := a.stream(ctx, id)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a stream under the bound: %v %v", resp, err)
		}
		open = append(open, resp)
	}
	third, err := a.stream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	third.Body.Close()
	resp := third
	raw := ""
	if third.StatusCode == http.StatusTooManyRequests {
		resp, raw = a.request(http.DefaultClient, "GET", "/v1/prompts/"+id+"/events", testToken, "")
	}
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(raw, "api.max_streams") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third stream: %d %s (Retry-After %q)", resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	if st := a.Stats(); st.Streams != 2 {
		t.Errorf("%d streams counted, want 2", st.Streams)
	}
	open[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Streams != 1 {
		if time.Now().After(deadline) {
			t.Fatal("a closed stream is still counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	again, err := a.stream(ctx, id)
	if err != nil || again.StatusCode != http.StatusOK {
		t.Fatalf("a stream once one closed: %v %v", again, err)
	}
	again.Body.Close()
	open[1].Body.Close()
}

// from is a client whose connections come from the loopback address ip.
func from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// Failed authentications are limited by remote address: past
// authFailures in a minute the address is answered 429 with Retry-After,
// while another address is still answered.
func TestAuthenticate_FailuresLimitedByAddress(t *testing.T) {
	a := listen(t, nil)
	guesser := from("127.0.0.2")
	for i := range authFailures {
		token := fmt.Sprintf("guess-%d-0123456789abcdef", i)
		if i%2 == 1 {
			token = "" // no token fails as well
		}
		if resp, raw := a.request(guesser, "GET", "/v1/prompts/p-x", token, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i+1, resp.StatusCode, raw)
		}
	}
	resp, raw := a.request(guesser, "GET", "/v1/prompts/p-x", "guess-last-0123456789abcdef", "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(raw, "failed authentications from 127.0.0.2") {
		t.Fatalf("past %d failures: %d %s (Retry-After %q)", authFailures, resp.StatusCode, raw, resp.Header.Get("Retry-After"))
	}
	if resp, raw := a.request(from("127.0.0.3"), "GET", "/v1/prompts/p-x", testToken, ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another address with the token: %d %s", resp.StatusCode, raw)
	}
}

// The failing addresses remembered are bounded.
func TestAuthenticate_FailingAddressesBounded(t *testing.T) {
	a := newAuth(time.Now)
	now := time.Now()
	for i := range maxFailingAddrs + 100 {
		a.failed(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
	}
	if n := a.failures.Len(); n > maxFailingAddrs {
		t.Errorf("%d addresses remembered, more than %d", n, maxFailingAddrs)
	}
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// Two hundred prompts of 5 MiB answers each, ended, keep no more than
// keepEndedBytes in memory in all, the oldest dropped first; each keeps
// its last endedEventBytes of events, so that a late stream gets the
// end (after a gap event saying how many it missed), and GET the clipped
// answer.
func TestEnded_PromptsMemoryIsBoundedInBytes(t *testing.T) {
	a := listen(t, nil)
	before := heapInUse()
	piece := strings.Repeat("x", 64<<10)
	answer := strings.Repeat(piece, 80) // 5 MiB
	var ids []string
	const n = 200
	for range n {
		id, p := a.start()
		ids = append(ids, id)
		p.Sink.Status(adapter.Status{Phase: adapter.PhaseWorking})
		for range 80 {
			p.Sink.Update(chunk(piece))
		}
		done(p, answer)
	}
	answer = ""
	after := heapInUse()
	kept, bytes := a.prompts.kept()
	t.Logf("%d prompts of 5 MiB: %d kept in memory, %d MiB counted; the heap grew %d MiB", n, kept, bytes>>20, (int64(after)-int64(before))>>20)
	if bytes > keepEndedBytes {
		t.Errorf("the ended prompts keep %d bytes, more than %d", bytes, keepEndedBytes)
	}
	if grew := int64(after) - int64(before); grew > keepEndedBytes+16<<20 {
		t.Errorf("the heap grew %d MiB for ended prompts, more than their %d MiB and a margin", grew>>20, keepEndedBytes>>20)
	}
	if kept == 0 || kept == n {
		t.Fatalf("%d of %d ended prompts kept in memory: want the newest alone", kept, n)
	}
	last := ids[len(ids)-1]
	resp, err := a.stream(context.Background(), last)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var types []string
	for {
		typ, _, err := nextEvent(r)
		if err != nil {
			break
		}
		types = append(types, typ)
	}
	if len(types) < 2 || types[0] != "gap" || types[len(types)-1] != "end" {
		t.Errorf("a late stream of an ended prompt: %v, want a gap, the last events, and the end", types)
	}
	if resp, raw := a.request(http.DefaultClient, "GET", "/v1/prompts/"+last, testToken, ""); resp.StatusCode != http.StatusOK || !strings.Contains(raw, `"answer_bytes":5242880`) {
		t.Errorf("GET of an ended prompt: %d %.200s", resp.StatusCode, raw)
	}
}
