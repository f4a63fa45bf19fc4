package fakeagent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// floods runs the modes that send far more than a client should keep, or
// ask what a client should refuse; it reports whether cmd was one.
func (a *agent) floods(t *turn, cmd string, args []string) bool {
	arg := func(i, def int) int {
		if i < len(args) {
			if n, err := strconv.Atoi(args[i]); err == nil {
				return n
			}
		}
		return def
	}
	sid := t.sid
	switch cmd {
	case "flood-answer", "flood-thoughts":
		kind := "agent_message_chunk"
		if cmd == "flood-thoughts" {
			kind = "agent_thought_chunk"
		}
		if !a.stream(t, kind, int64(arg(0, 64))<<20, arg(1, 64)<<10) {
			t.stop("cancelled")
			return true
		}
		if cmd == "flood-thoughts" {
			a.chunk(sid, "thought a lot")
		}
		t.stop("end_turn")
	case "flood-tools":
		n, size := arg(0, 1000), arg(1, 1)<<10
		title := strings.Repeat("t", size)
		for i := range n {
			select {
			case <-t.cancel:
				t.stop("cancelled")
				return true
			default:
			}
			id := fmt.Sprintf("flood-%d", i)
			old, new := strings.Repeat("old line\n", size/9+1), strings.Repeat("new line\n", size/9+1)
			a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": id, "title": fmt.Sprint(i, " ", title), "kind": "edit", "status": "in_progress",
				"content": []any{map[string]any{"type": "diff", "path": fmt.Sprintf("/f%d.txt", i), "oldText": old, "newText": new}}})
			a.toolStatus(sid, id, "completed")
		}
		a.chunk(sid, fmt.Sprintf("made %d tool calls", n))
		t.stop("end_turn")
	case "flood-input":
		// Tool calls each with a raw input of SIZE KiB.
		n, size := arg(0, 64), arg(1, 1024)<<10
		input := map[string]string{"command": strings.Repeat("i", size)}
		for i := range n {
			select {
			case <-t.cancel:
				t.stop("cancelled")
				return true
			default:
			}
			a.update(sid, map[string]any{"sessionUpdate": "tool_call", "toolCallId": fmt.Sprintf("input-%d", i), "title": fmt.Sprint("input ", i),
				"kind": "execute", "status": "completed", "rawInput": input})
		}
		a.chunk(sid, fmt.Sprintf("sent %d inputs", n))
		t.stop("end_turn")
	case "flood-plan":
		n, size := arg(0, 1000), arg(1, 1)<<10
		entries := make([]map[string]string, n)
		for i := range entries {
			entries[i] = map[string]string{"content": fmt.Sprint(i, " ", strings.Repeat("p", size)), "priority": "medium", "status": "pending"}
		}
		for range 10 {
			a.update(sid, map[string]any{"sessionUpdate": "plan", "entries": entries})
		}
		a.chunk(sid, fmt.Sprintf("planned %d steps", n))
		t.stop("end_turn")
	case "flood-unknown":
		a.unknownSessions(arg(0, 64), arg(1, 1024)<<10, arg(2, 8))
		a.chunk(sid, "flooded")
		t.stop("end_turn")
	case "deep-request":
		depth := arg(0, 100_000)
		nested := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		resp, ok := a.rawRequest(`"deep-1"`, `{"jsonrpc":"2.0","id":"deep-1","method":"fs/read_text_file","params":{"sessionId":"`+sid+`","path":`+nested+`}}`)
		if !ok {
			return true
		}
		if resp.Error != nil {
			a.chunk(sid, fmt.Sprintf("answered: error %d: %s", resp.Error.Code, resp.Error.Message))
		} else {
			a.chunk(sid, "answered: "+string(resp.Result))
		}
		t.stop("end_turn")
	case "fs-sparse":
		a.readSparse(t, int64(arg(0, 40))<<30, arg(1, 2), arg(2, 1))
	default:
		return false
	}
	return true
}

// stream sends total bytes as updates of kind, size bytes each, lines of
// a's; the first starts with "BEGIN\n", the last ends with "\nEND". It
// reports false if the turn was cancelled.
func (a *agent) stream(t *turn, kind string, total int64, size int) bool {
	size = max(size, 16)
	line := strings.Repeat("a", 63) + "\n"
	body := strings.Repeat(line, size/len(line)+1)[:size]
	for sent := int64(0); sent < total; sent += int64(size) {
		select {
		case <-t.cancel:
			return false
		case <-a.ctx.Done():
			return false
		default:
		}
		text := body
		switch {
		case sent == 0:
			text = "BEGIN\n" + body[6:]
		case sent+int64(size) >= total:
			text = body[:size-4] + "\nEND"
		}
		a.update(t.sid, map[string]any{"sessionUpdate": kind, "content": map[string]any{"type": "text", "text": text}})
	}
	return true
}

// unknownSessions sends lines updates of size bytes for each of ids
// sessions that were never created.
func (a *agent) unknownSessions(lines, size, ids int) {
	text := strings.Repeat("u", size)
	for i := range lines {
		for id := range ids {
			a.update(fmt.Sprintf("made-up-%d", id), map[string]any{"sessionUpdate": "agent_message_chunk",
				"content": map[string]any{"type": "text", "text": fmt.Sprint(i, text)}})
		}
	}
}

// rawRequest sends line, a request whose id is id, as it is, and waits
// for its answer.
func (a *agent) rawRequest(id, line string) (message, bool) {
	ch := make(chan message, 1)
	a.mu.Lock()
	a.waiting[id] = ch
	a.mu.Unlock()
	a.raw(line)
	select {
	case m := <-ch:
		return m, true
	case <-a.ctx.Done():
		return message{}, false
	}
}

// readSparse makes a sparse file of size bytes whose first line is
// endless, asks the client for line at once n times, and says how many
// were answered, with what, and how long it took.
func (a *agent) readSparse(t *turn, size int64, line, n int) {
	sid := t.sid
	a.mu.Lock()
	cwd := a.cwds[sid]
	a.mu.Unlock()
	path := filepath.Join(cwd, "huge-sparse.txt")
	if err := os.WriteFile(path, nil, 0o644); err == nil {
		err = os.Truncate(path, size)
		if err != nil {
			a.chunk(sid, "no sparse file: "+err.Error())
			t.stop("end_turn")
			return
		}
	}
	start := time.Now()
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		answered, errs   int
		firstErr, result string
	)
	for range n {
		wg.Go(func() {
			resp, ok := a.request("fs/read_text_file", map[string]any{"sessionId": sid, "path": path, "line": line, "limit": 1}, "")
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				return
			}
			answered++
			if resp.Error != nil {
				errs++
				if firstErr == "" {
					firstErr = fmt.Sprintf("%d: %s", resp.Error.Code, resp.Error.Message)
				}
			} else if result == "" {
				var r struct{ Content string }
				json.Unmarshal(resp.Result, &r)
				result = fmt.Sprintf("%d bytes", len(r.Content))
			}
		})
	}
	wg.Wait()
	os.Remove(path)
	a.chunk(sid, fmt.Sprintf("%d of %d answered, %d errors, in %s; first error: %s; a result: %s\n",
		answered, n, errs, time.Since(start).Round(time.Millisecond), firstErr, result))
	t.stop("end_turn")
}
