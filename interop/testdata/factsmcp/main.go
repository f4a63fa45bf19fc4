// Command factsmcp is a minimal MCP server over stdio for the interop
// tests: one tool, lookup_fact, whose answer carries $FACTS_NONCE, so a
// test can tell that the agent started this server with the environment
// it was given and that the answer reached the model. Each request's
// method is appended to $FACTS_LOG, if set.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func main() {
	out := json.NewEncoder(os.Stdout)
	reply := func(id json.RawMessage, result any) {
		_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": result})
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	for in.Scan() {
		var m message
		if err := json.Unmarshal(in.Bytes(), &m); err != nil || m.Method == "" {
			continue
		}
		note(m.Method)
		if m.ID == nil {
			continue // a notification (notifications/initialized and the like)
		}
		switch m.Method {
		case "initialize":
			var p struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			_ = json.Unmarshal(m.Params, &p)
			reply(m.ID, map[string]any{
				"protocolVersion": p.ProtocolVersion,
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]string{"name": "factsmcp", "version": "1"},
			})
		case "ping":
			reply(m.ID, map[string]any{})
		case "tools/list":
			reply(m.ID, map[string]any{"tools": []any{map[string]any{
				"name":        "lookup_fact",
				"description": "Looks up the fact about a topic.",
				"inputSchema": map[string]any{
					"type":       "object",
					"properties": map[string]any{"topic": map[string]string{"type": "string"}},
					"required":   []string{"topic"},
				},
			}}})
		case "tools/call":
			var p struct {
				Name      string `json:"name"`
				Arguments struct {
					Topic string `json:"topic"`
				} `json:"arguments"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Name != "lookup_fact" {
				_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32602, "message": "unknown tool " + p.Name}})
				continue
			}
			text := fmt.Sprintf("The fact about %s is %s.", p.Arguments.Topic, os.Getenv("FACTS_NONCE"))
			reply(m.ID, map[string]any{"content": []any{map[string]string{"type": "text", "text": text}}, "isError": false})
		default:
			_ = out.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "error": map[string]any{"code": -32601, "message": "method not found: " + m.Method}})
		}
	}
}

// note appends a method name to $FACTS_LOG.
func note(method string) {
	path := os.Getenv("FACTS_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, method)
}
