package acp

import (
	"encoding/json"
	"fmt"

	"github.com/rs/zerolog"
)

// MCP server transports. A stdio server carries no "type" on the wire.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// EnvVariable is one variable of a stdio MCP server's environment.
type EnvVariable struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPHeader is one header an http or sse MCP server is called with.
type HTTPHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// MCPServer is an MCP server the agent connects to for a session. Type
// picks the transport and the fields that apply: Command, Args and Env for
// stdio (the agent starts Command itself, so it must be an absolute path
// the agent can see); URL and Headers for http and sse.
//
// Env and header values are often credentials: String and the logging in
// this package show names only, and so should any caller.
type MCPServer struct {
	// Type is MCPStdio (or empty), MCPHTTP or MCPSSE.
	Type    string
	Name    string
	Command string
	Args    []string
	Env     []EnvVariable
	URL     string
	Headers []HTTPHeader
}

// Transport is the server's transport, MCPStdio when Type is empty.
func (s MCPServer) Transport() string {
	if s.Type == "" {
		return MCPStdio
	}
	return s.Type
}

// String names the server and its transport, never its values.
func (s MCPServer) String() string { return s.Name + " (" + s.Transport() + ")" }

// MarshalJSON writes the spec's shape for the transport: stdio as
// {name, command, args, env}, http and sse as {type, name, url, headers},
// with empty lists written as [].
func (s MCPServer) MarshalJSON() ([]byte, error) {
	switch s.Transport() {
	case MCPStdio:
		return json.Marshal(struct {
			Name    string        `json:"name"`
			Command string        `json:"command"`
			Args    []string      `json:"args"`
			Env     []EnvVariable `json:"env"`
		}{s.Name, s.Command, orEmpty(s.Args), orEmpty(s.Env)})
	case MCPHTTP, MCPSSE:
		return json.Marshal(struct {
			Type    string       `json:"type"`
			Name    string       `json:"name"`
			URL     string       `json:"url"`
			Headers []HTTPHeader `json:"headers"`
		}{s.Type, s.Name, s.URL, orEmpty(s.Headers)})
	default:
		return nil, fmt.Errorf("mcp server %q: unknown transport %q", s.Name, s.Type)
	}
}

// UnmarshalJSON reads either shape; a server without "type" is stdio.
func (s *MCPServer) UnmarshalJSON(b []byte) error {
	var w struct {
		Type    string        `json:"type"`
		Name    string        `json:"name"`
		Command string        `json:"command"`
		Args    []string      `json:"args"`
		Env     []EnvVariable `json:"env"`
		URL     string        `json:"url"`
		Headers []HTTPHeader  `json:"headers"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*s = MCPServer(w)
	return nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// MCPCapabilities says which MCP transports beyond stdio the agent takes.
type MCPCapabilities struct {
	HTTP bool `json:"http"`
	SSE  bool `json:"sse"`
}

// Supports reports whether an agent with these capabilities can use a
// server of the given transport. Every agent takes stdio.
func (c MCPCapabilities) Supports(transport string) bool {
	switch transport {
	case MCPStdio, "":
		return true
	case MCPHTTP:
		return c.HTTP
	case MCPSSE:
		return c.SSE
	}
	return false
}

// UsableMCPServers returns the servers an agent with caps can use, in
// order: every stdio server, and http and sse servers only when the agent
// advertised that transport. The others are left out, not an error, with
// one warning on log naming them (names and transports only). Call it
// once per agent process, after initialize, and give the result to every
// NewSession and LoadSession of that process.
func UsableMCPServers(caps AgentCapabilities, servers []MCPServer, log zerolog.Logger) []MCPServer {
	usable := make([]MCPServer, 0, len(servers))
	var left []string
	for _, s := range servers {
		if caps.MCPCapabilities.Supports(s.Transport()) {
			usable = append(usable, s)
		} else {
			left = append(left, s.String())
		}
	}
	if len(left) > 0 {
		log.Warn().Strs("mcp_servers", left).
			Msg("the agent does not advertise these MCP servers' transports (mcpCapabilities); its sessions start without them")
	}
	return usable
}
