package broker

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/internal/eventually"
	"acpbroker/pool"
)

const apiTestToken = "ci-token-0123456789abcdef"

// apiPrompt posts a prompt to the broker's API and waits, within 30 s,
// for it to end; it returns its thread.
func apiPrompt(t *testing.T, b *Broker, text string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+b.APIAddr()+"/v1/prompts", strings.NewReader(fmt.Sprintf(`{"text": %q}`, text)))
	req.Header.Set("Authorization", "Bearer "+apiTestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var started struct{ ID, Thread string }
	if json.Unmarshal(raw, &started); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /v1/prompts: %d %s", resp.StatusCode, raw)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest("GET", "http://"+b.APIAddr()+"/v1/prompts/"+started.ID, nil)
		req.Header.Set("Authorization", "Bearer "+apiTestToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ State, Error string }
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		switch v.State {
		case "done":
			return started.Thread
		case "failed", "cancelled":
			t.Fatalf("prompt %s ended %s: %s", started.ID, v.State, v.Error)
		}
		if time.Now().After(deadline) {
			t.Fatalf("prompt %s is still %s", started.ID, v.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// One-shot prompts through the API, in threads of the API's own, beside
// the console: each one's agent is stopped after its turn, so that in a
// pool of two, eight of them one after another never push the console
// user's idle agent out (its process and its conversation go on), and
// nothing is stopped for room.
func TestAPI_OneShotPromptsNeverPushAChatUsersAgentOut(t *testing.T) {
	cfg, err := config.Load(writeConfigArgs(t, nil, fmt.Sprintf(`[pool]
max_sessions = 2
[api]
listen = "127.0.0.1:0"
rate_limit = 10000
[[api.tokens]]
name = "ci"
token = %q
channels = ["*"]
`, apiTestToken)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	const console = "console"
	s := newDoneSink()
	if err := b.engine.Submit(console, &adapter.Prompt{Blocks: []acp.ContentBlock{acp.TextBlock("hello")}, Sink: s}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-s.done:
		if o.Err != nil {
			t.Fatal(o.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the console's turn never ended")
	}
	a := b.pool.Lookup(console)
	if a == nil {
		t.Fatal("the console's agent is not in the pool after its turn")
	}
	pid := a.Proc.PID()
	threads := map[string]bool{}
	for i := range 8 {
		threads[apiPrompt(t, b, fmt.Sprintf("one-shot %d", i))] = true
	}
	if len(threads) != 8 {
		t.Fatalf("8 prompts ran in %d threads", len(threads))
	}
	if a := b.pool.Lookup(console); a == nil || a.Proc.PID() != pid || !a.Proc.Alive() {
		t.Fatalf("the console user's agent (pid %d) was pushed out of the pool by one-shot prompts", pid)
	}
	var st pool.Stats
	if !eventually.Wait(eventually.Patience, func() bool {
		st = b.pool.Stats()
		return st.Stopped[pool.StopLRU] != 0 || st.Live == 1 && st.Stopping == 0 && st.Stopped[pool.StopOneShot] == 8
	}) {
		t.Fatalf("pool after 8 one-shot prompts: %d live, %d stopping, stops %v; want the console's agent alone, 8 one-shot stops", st.Live, st.Stopping, st.Stopped)
	}
	if st.Stopped[pool.StopLRU] != 0 {
		t.Fatalf("%d agents were stopped to make room", st.Stopped[pool.StopLRU])
	}
	for th := range threads {
		if b.pool.Lookup("api:"+th) != nil {
			t.Errorf("the agent of thread %s outlived its turn", th)
		}
	}
}
