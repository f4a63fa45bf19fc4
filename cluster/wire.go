package cluster

import (
	"acpbroker/pool"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"acpbroker/acp"
)

// Subjects. A host is addressed by its instance id, an agent by the id the
// broker gave it, so that names chosen by people never become subjects.
const (
	subjPrefix     = "acpbroker"
	subjHostBeat   = subjPrefix + ".beat.host"
	subjBrokerBeat = subjPrefix + ".beat.broker"
	subjAsk        = subjPrefix + ".hosts.ask"
)

func hostStartSubject(instance string) string { return subjPrefix + ".host." + instance + ".start" }

func hostAdoptSubject(instance string) string { return subjPrefix + ".host." + instance + ".adopt" }

// agentSubject is one of an agent's subjects: "out" and "outack" (stdout),
// "in" and "inack" (stdin), "ctl" (requests to the host about it).
func agentSubject(id, what string) string { return subjPrefix + ".agent." + id + "." + what }

// maxMembers bounds the hosts a broker knows, and the brokers a host
// knows.
const maxMembers = 1024

// hostBeat is what a host says of itself every beat.
type hostBeat struct {
	Name     string            `json:"name"`
	Instance string            `json:"instance"`
	Labels   map[string]string `json:"labels,omitempty"`
	Profiles []string          `json:"profiles"`
	Capacity int               `json:"capacity"`
	// Running counts the agents started, not those being started: a
	// broker counts its own starts under way.
	Running      int    `json:"running"`
	MemTotal     uint64 `json:"memTotal,omitempty"`
	MemAvailable uint64 `json:"memAvailable,omitempty"`
	// Agents are the agents it runs, with the broker instance each is for.
	Agents []beatAgent `json:"agents,omitempty"`
}

type beatAgent struct {
	ID     string `json:"id"`
	Broker string `json:"broker"`
	// Usage is what the agent uses as the host counts it (nil when the
	// host cannot say), UsageError why not.
	Usage      *pool.Usage `json:"usage,omitempty"`
	UsageError string      `json:"usageError,omitempty"`
}

// brokerBeat is what a broker says of itself every beat.
type brokerBeat struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
}

// startRequest asks a host to start an agent.
type startRequest struct {
	ID             string `json:"id"`
	Thread         string `json:"thread"`
	Profile        string `json:"profile"`
	Broker         string `json:"broker"`
	BrokerInstance string `json:"brokerInstance"`
}

type startReply struct {
	Dir       string `json:"dir,omitempty"`
	Terminals bool   `json:"terminals,omitempty"`
	PID       int    `json:"pid,omitempty"`
	// Shared: the host pushes the thread's branch to a shared repository
	// after each turn (Started.AfterTurn).
	Shared bool `json:"shared,omitempty"`
	// MCPServers are the MCP servers of the profile as the host defines
	// it (never null: a host that sends none is one that predates them).
	MCPServers []acp.MCPServer `json:"mcpServers"`
	// Full: refused for lack of room; the broker tries another host.
	Full  bool   `json:"full,omitempty"`
	Error string `json:"error,omitempty"`
}

// adoptRequest asks a host for the agents it runs for an earlier run of
// Broker: they are this run's from then on.
type adoptRequest struct {
	Broker         string `json:"broker"`
	BrokerInstance string `json:"brokerInstance"`
}

// adoptedAgent is one agent a host hands over: Out is the number of the
// first chunk of its stdout the new run is to read (every chunk not
// consumed by the earlier run comes again), In the number its stdin's
// next chunk is to have.
type adoptedAgent struct {
	ID        string `json:"id"`
	Thread    string `json:"thread"`
	Profile   string `json:"profile"`
	Dir       string `json:"dir"`
	PID       int    `json:"pid"`
	Terminals bool   `json:"terminals,omitempty"`
	Shared    bool   `json:"shared,omitempty"`
	Out       uint64 `json:"out"`
	In        uint64 `json:"in"`
}

type adoptReply struct {
	Agents []adoptedAgent `json:"agents"`
}

// keptResult answers ctlKept: the note kept beside the agent (none:
// null), and the MCP servers of its profile as the host defines it (as in
// a startReply). Each agent's, apart: with its note, it may be big.
type keptResult struct {
	Note       json.RawMessage `json:"note"`
	MCPServers []acp.MCPServer `json:"mcpServers"`
}

// maxKept bounds what a broker may keep beside an agent on its host (see
// ctlKeep).
const maxKept = 256 << 10

// endInfo is the body of a stdout stream's End frame.
type endInfo struct {
	Err    string `json:"err,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// Control methods beside acp.Host's.
const (
	ctlStop             = "stop"
	ctlKill             = "kill"
	ctlAlive            = "alive"
	ctlRelease          = "release"
	ctlOpenSession      = "openSession"
	ctlCloseSession     = "closeSession"
	ctlKillTerminals    = "killTerminals"
	ctlReleaseTerminals = "releaseTerminals"
	ctlOutput           = "output"
	ctlClose            = "close"
	// ctlTurned: a turn of the agent's thread ended (no answer).
	ctlTurned = "turned"
	// ctlKeep: keep this beside the agent, for a later run of the broker
	// (no answer); ctlKept: what was kept.
	ctlKeep = "keep"
	ctlKept = "kept"
	// ctlLeft: the broker left the agent for its next run (no answer).
	ctlLeft = "left"
)

type ctlReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireErr        `json:"error,omitempty"`
}

// wireErr carries an error with the ACP code it is answered with, so the
// broker's Conn gives the agent the code the host's Host chose.
type wireErr struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// errorCode is the code the broker's Conn answers err with; it follows
// acp's mapping of the errors a Host returns.
func errorCode(err error) int64 {
	switch {
	case errors.Is(err, acp.ErrOutsideRoot), errors.Is(err, acp.ErrUnknownSession), errors.Is(err, acp.ErrInvalidParams):
		return acp.CodeInvalidParams
	case errors.Is(err, fs.ErrNotExist):
		return acp.CodeNotFound
	case errors.Is(err, acp.ErrMethodNotFound):
		return acp.CodeMethodNotFound
	case errors.Is(err, acp.ErrRequestCancelled):
		return acp.CodeCancelled
	}
	return acp.CodeInternalError
}

// remoteError is an error a host's Host answered with, carried back: its
// text is the host's, and it is the sentinel its code stands for.
type remoteError struct {
	code int64
	msg  string
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	switch e.code {
	case acp.CodeInvalidParams:
		return target == acp.ErrInvalidParams
	case acp.CodeNotFound:
		return target == fs.ErrNotExist
	case acp.CodeMethodNotFound:
		return target == acp.ErrMethodNotFound
	case acp.CodeCancelled:
		return target == acp.ErrRequestCancelled
	}
	return false
}

func (w *wireErr) err() error { return &remoteError{code: w.Code, msg: w.Message} }

func toWireErr(err error) *wireErr {
	if err == nil {
		return nil
	}
	return &wireErr{Code: errorCode(err), Message: err.Error()}
}

// orNone is list, or an empty one for nil, so that it is sent as [].
func orNone[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cluster: encoding %T: %v", v, err))
	}
	return b
}
