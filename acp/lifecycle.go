package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"acpbroker/internal/clip"
)

// SessionInfo is one session an agent lists (session/list).
type SessionInfo struct {
	SessionID string
	// Cwd is the directory the session works in, as the agent says.
	Cwd string
	// Title is the agent's title for it ("" when it has none).
	Title string
	// Updated is when it was last active, as the agent says (zero when
	// it did not, or not as a date).
	Updated time.Time
}

// Bounds of what ListSessions keeps of the agent's answers: at most
// maxListPages pages are asked for; a session whose id is longer than
// maxSessionIDBytes is left out; titles and directories are cut to
// maxListTextBytes; a cursor longer than maxCursorBytes ends the listing.
const (
	maxListPages     = 8
	maxListTextBytes = 1 << 10
	maxCursorBytes   = 4 << 10
)

type listSessionsParams struct {
	Cwd    string `json:"cwd,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

type listSessionsResult struct {
	Sessions []struct {
		SessionID string  `json:"sessionId"`
		Cwd       string  `json:"cwd"`
		Title     *string `json:"title"`
		UpdatedAt *string `json:"updatedAt"`
	} `json:"sessions"`
	NextCursor *string `json:"nextCursor"`
}

// ListSessions asks the agent for its sessions in cwd (session/list, which
// it must offer: AgentSessionCapabilities.List), page after page, until
// max are kept, the agent has no more, or maxListPages were read. The
// sessions are as the agent gave them, in its order, bounded as said
// above; an agent may list sessions of other directories too, and the
// caller decides what to show.
func (c *Conn) ListSessions(ctx context.Context, cwd string, max int) ([]SessionInfo, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return nil, err
	}
	var out []SessionInfo
	cursor := ""
	for range maxListPages {
		var res listSessionsResult
		if err := c.Call(ctx, MethodSessionList, listSessionsParams{Cwd: abs, Cursor: cursor}, &res); err != nil {
			return out, methodError(MethodSessionList, err)
		}
		for _, s := range res.Sessions {
			if len(out) == max {
				return out, nil
			}
			if s.SessionID == "" || len(s.SessionID) > maxSessionIDBytes {
				continue
			}
			info := SessionInfo{SessionID: s.SessionID, Cwd: clip.Cut(s.Cwd, maxListTextBytes)}
			if s.Title != nil {
				info.Title = clip.Cut(*s.Title, maxListTextBytes)
			}
			if s.UpdatedAt != nil {
				info.Updated, _ = time.Parse(time.RFC3339Nano, *s.UpdatedAt)
			}
			out = append(out, info)
		}
		if res.NextCursor == nil || *res.NextCursor == "" || *res.NextCursor == cursor || len(*res.NextCursor) > maxCursorBytes || len(out) == max {
			return out, nil
		}
		cursor = *res.NextCursor
	}
	return out, nil
}

// sessionParams are the params of session/resume and session/fork: the
// session named, and where the resumed or new one works.
type sessionParams struct {
	SessionID  string      `json:"sessionId"`
	Cwd        string      `json:"cwd"`
	MCPServers []MCPServer `json:"mcpServers"`
}

// ResumeSession continues an earlier session in this process without
// its history being replayed (session/resume, which the agent must
// offer: AgentSessionCapabilities.Resume), with the MCP servers given,
// as LoadSession does. What the agent sends for the session before it
// answers is returned.
func (c *Conn) ResumeSession(ctx context.Context, sessionID, cwd string, servers []MCPServer) ([]Update, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return nil, err
	}
	params := sessionParams{SessionID: sessionID, Cwd: abs, MCPServers: orEmpty(servers)}
	defer c.creatingSession()()
	var res sessionSetup
	err = c.Call(ctx, MethodSessionResume, params, &res)
	if isAuthRequired(err) {
		if err = c.authenticate(ctx); err == nil {
			err = c.Call(ctx, MethodSessionResume, params, &res)
		}
	}
	if err != nil {
		c.mu.Lock()
		c.takeEarlyLocked(sessionID)
		c.mu.Unlock()
		return nil, methodError(MethodSessionResume, err)
	}
	return c.registerSetup(sessionID, abs, res), nil
}

// ForkSession starts a new session from an earlier one (session/fork,
// still unstable in ACP, which the agent must offer:
// AgentSessionCapabilities.Fork), working in cwd with the MCP servers
// given. It returns the new session's id and what the agent sent for it
// before answering, as NewSession does.
func (c *Conn) ForkSession(ctx context.Context, sessionID, cwd string, servers []MCPServer) (string, []Update, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", nil, err
	}
	params := sessionParams{SessionID: sessionID, Cwd: abs, MCPServers: orEmpty(servers)}
	defer c.creatingSession()()
	var raw json.RawMessage
	err = c.Call(ctx, MethodSessionFork, params, &raw)
	if isAuthRequired(err) {
		if err = c.authenticate(ctx); err == nil {
			err = c.Call(ctx, MethodSessionFork, params, &raw)
		}
	}
	var res struct {
		SessionID string `json:"sessionId"`
	}
	var setup sessionSetup
	if err == nil {
		err = json.Unmarshal(raw, &res)
		_ = setup.UnmarshalJSON(raw)
	}
	if err != nil {
		return "", nil, methodError(MethodSessionFork, err)
	}
	if res.SessionID == "" {
		return "", nil, fmt.Errorf("session/fork: %w: empty sessionId", ErrInvalidParams)
	}
	if len(res.SessionID) > maxSessionIDBytes {
		return "", nil, fmt.Errorf("session/fork: %w: a sessionId of %d bytes, more than %d", ErrInvalidParams, len(res.SessionID), maxSessionIDBytes)
	}
	return res.SessionID, c.registerSetup(res.SessionID, abs, setup), nil
}

// CloseSession asks the agent to free a session (session/close, which it
// must offer: AgentSessionCapabilities.Close); once it has answered, the
// Conn forgets the session too. The session may still be resumed later,
// in this process or another, as the agent allows.
func (c *Conn) CloseSession(ctx context.Context, sessionID string) error {
	if err := c.Call(ctx, MethodSessionClose, cancelParams{SessionID: sessionID}, nil); err != nil {
		return methodError(MethodSessionClose, err)
	}
	c.mu.Lock()
	delete(c.sessions, sessionID)
	c.mu.Unlock()
	c.opts.Host.CloseSession(sessionID)
	return nil
}

// methodError names the method an error is of, unless the agent's own
// error answer does already.
func methodError(method string, err error) error {
	if _, ok := errors.AsType[*RPCError](err); ok {
		return err
	}
	return fmt.Errorf("%s: %w", method, err)
}
