package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// maxSessionIDBytes bounds the session id an agent may give: longer ones
// fail session/new.
const maxSessionIDBytes = 1 << 10

// session is what the Conn knows of a session it created or loaded; its
// directory is the Host's to know.
type session struct {
	state SessionState
}

// Initialize performs the initialize handshake and returns the agent's
// capabilities. A protocol version other than ours is an error.
func (c *Conn) Initialize(ctx context.Context) (*InitializeResult, error) {
	_, none := c.opts.Host.(noHost)
	hosted := !none
	params := InitializeParams{
		ProtocolVersion: ProtocolVersion,
		ClientCapabilities: ClientCapabilities{FS: FSCapabilities{ReadTextFile: hosted, WriteTextFile: hosted}, Terminal: c.opts.Host.Terminals(), Session: sessionCapabilities,
			Elicitation: &ElicitationCapabilities{Form: &struct{}{}, URL: &struct{}{}}},
		ClientInfo: c.opts.ClientInfo,
	}
	var res InitializeResult
	if err := c.Call(ctx, MethodInitialize, params, &res); err != nil {
		return nil, fmt.Errorf("initialize: %w", err)
	}
	if res.ProtocolVersion != ProtocolVersion {
		return nil, fmt.Errorf("%w: %d (want %d)", ErrProtocolVersion, res.ProtocolVersion, ProtocolVersion)
	}
	c.mu.Lock()
	c.init = &res
	c.mu.Unlock()
	return &res, nil
}

// NewSession creates a session rooted at cwd (made absolute) with the MCP
// servers given, sent as they are (see UsableMCPServers). If the agent
// answers "authentication required" and Options.AuthMethod is set, it
// authenticates and tries once more. Updates the agent sent for the session
// before answering are returned with it.
func (c *Conn) NewSession(ctx context.Context, cwd string, servers []MCPServer) (string, []Update, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", nil, err
	}
	params := NewSessionParams{Cwd: abs, MCPServers: orEmpty(servers)}
	defer c.creatingSession()()
	var res struct {
		SessionID string       `json:"sessionId"`
		Setup     sessionSetup `json:"-"`
	}
	var raw json.RawMessage
	err = c.Call(ctx, MethodSessionNew, params, &raw)
	if isAuthRequired(err) {
		if err = c.authenticate(ctx); err == nil {
			err = c.Call(ctx, MethodSessionNew, params, &raw)
		}
	}
	if err == nil {
		err = json.Unmarshal(raw, &res)
		_ = res.Setup.UnmarshalJSON(raw)
	}
	if err != nil {
		return "", nil, fmt.Errorf("session/new: %w", err)
	}
	if res.SessionID == "" {
		return "", nil, fmt.Errorf("session/new: %w: empty sessionId", ErrInvalidParams)
	}
	if len(res.SessionID) > maxSessionIDBytes {
		// It is logged with every line of a turn and kept in the state
		// store, to resume the session.
		return "", nil, fmt.Errorf("session/new: %w: a sessionId of %d bytes, more than %d", ErrInvalidParams, len(res.SessionID), maxSessionIDBytes)
	}
	return res.SessionID, c.registerSetup(res.SessionID, abs, res.Setup), nil
}

// LoadSession resumes an earlier session (only when the agent advertised
// loadSession) with the MCP servers given, as NewSession does. The history
// the agent replays is returned, not routed to any turn.
func (c *Conn) LoadSession(ctx context.Context, sessionID, cwd string, servers []MCPServer) ([]Update, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return nil, err
	}
	params := LoadSessionParams{SessionID: sessionID, Cwd: abs, MCPServers: orEmpty(servers)}
	defer c.creatingSession()()
	var res sessionSetup
	err = c.Call(ctx, MethodSessionLoad, params, &res)
	if isAuthRequired(err) {
		if err = c.authenticate(ctx); err == nil {
			err = c.Call(ctx, MethodSessionLoad, params, &res)
		}
	}
	if err != nil {
		c.mu.Lock()
		c.takeEarlyLocked(sessionID)
		c.mu.Unlock()
		return nil, fmt.Errorf("session/load: %w", err)
	}
	return c.registerSetup(sessionID, abs, res), nil
}

// Adopt makes the Conn know an agent that an earlier Conn over the same
// stdio initialized and gave a session: init is what that Conn's
// Initialize returned, and the session, rooted at cwd, is in state. Used
// for an agent that outlived the broker that started it; nothing is sent.
func (c *Conn) Adopt(init InitializeResult, sessionID, cwd string, state SessionState) error {
	if init.ProtocolVersion != ProtocolVersion {
		return fmt.Errorf("%w: %d (want %d)", ErrProtocolVersion, init.ProtocolVersion, ProtocolVersion)
	}
	if sessionID == "" || len(sessionID) > maxSessionIDBytes {
		return fmt.Errorf("%w: a session id of %d bytes", ErrInvalidParams, len(sessionID))
	}
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.init = &init
	c.mu.Unlock()
	c.opts.Host.OpenSession(sessionID, abs)
	c.mu.Lock()
	c.sessions[sessionID] = &session{state: state}
	c.mu.Unlock()
	return nil
}

func (c *Conn) register(sessionID, cwd string) []Update {
	return c.registerSetup(sessionID, cwd, sessionSetup{})
}

// registerSetup makes a session known, with the state its updates sent
// before the answer and then the answer itself describe.
func (c *Conn) registerSetup(sessionID, cwd string, setup sessionSetup) []Update {
	c.opts.Host.OpenSession(sessionID, cwd)
	s := &session{}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions[sessionID] = s
	var early []Update
	if q := c.takeEarlyLocked(sessionID); q != nil {
		// Its updates came before the answer: the state they set first.
		s.state, early = q.state, q.updates
	}
	ch := setup.change()
	s.state.apply(ch)
	c.stats.unknownOptions.Add(uint64(ch.skipped))
	return early
}

func isAuthRequired(err error) bool {
	var rpcErr *RPCError
	return errors.As(err, &rpcErr) && rpcErr.Code == CodeAuthRequired
}

func (c *Conn) authenticate(ctx context.Context) error {
	c.mu.Lock()
	var offered []string
	if c.init != nil {
		for _, m := range c.init.AuthMethods {
			offered = append(offered, m.ID)
		}
	}
	c.mu.Unlock()
	if c.opts.AuthMethod == "" {
		return fmt.Errorf("%w: set agent.auth_method (agent offers: %s)", ErrAuthRequired, strings.Join(offered, ", "))
	}
	err := c.Call(ctx, MethodAuthenticate, map[string]string{"methodId": c.opts.AuthMethod}, nil)
	if err != nil {
		return fmt.Errorf("authenticate with %q: %w", c.opts.AuthMethod, err)
	}
	return nil
}

// Prompt starts a prompt turn and returns its Call; the caller owns the
// wait. The Call's result decodes into PromptResult.
func (c *Conn) Prompt(ctx context.Context, sessionID string, prompt []ContentBlock) (*Call, error) {
	return c.Start(ctx, MethodSessionPrompt, PromptParams{SessionID: sessionID, Prompt: prompt})
}

// Initialized returns what the agent answered to initialize (or what
// Adopt was given), and false before either.
func (c *Conn) Initialized() (InitializeResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == nil {
		return InitializeResult{}, false
	}
	return *c.init, true
}

// Capabilities returns what the agent advertised in initialize, or the zero
// value before it.
func (c *Conn) Capabilities() AgentCapabilities {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.init == nil {
		return AgentCapabilities{}
	}
	return c.init.AgentCapabilities
}
