package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sourcegraph/jsonrpc2"
)

// serveFS answers fs/read_text_file and fs/write_text_file on a goroutine
// the Conn owns. Paths are confined to the session's working directory:
// ".." and symlinks that lead outside it are refused.
func (c *Conn) serveFS(req *jsonrpc2.Request) {
	if req.Notif {
		c.stats.badMessages.Add(1)
		return
	}
	c.spawn(func() {
		var (
			result any
			err    error
		)
		switch req.Method {
		case MethodReadTextFile:
			var p readTextFileParams
			if err = decodeParams(req, &p); err == nil {
				result, err = c.readTextFile(&p)
			}
		case MethodWriteTextFile:
			var p writeTextFileParams
			if err = decodeParams(req, &p); err == nil {
				err = c.writeTextFile(&p)
				result = struct{}{}
			}
		}
		if err != nil {
			c.log.Warn().Err(err).Str("method", req.Method).Msg("file request refused")
			err = c.rpc.ReplyWithError(context.Background(), req.ID, wireError(err))
		} else {
			err = c.rpc.Reply(context.Background(), req.ID, result)
		}
		if err != nil {
			c.log.Debug().Err(err).Msg("file reply not sent")
		}
	})
}

func decodeParams(req *jsonrpc2.Request, v any) error {
	if req.Params == nil {
		return fmt.Errorf("%w: missing params", errBadParams)
	}
	if err := json.Unmarshal(*req.Params, v); err != nil {
		return fmt.Errorf("%w: %v", errBadParams, err)
	}
	return nil
}

func (c *Conn) sessionFor(id string) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[id]
	if s == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownSession, id)
	}
	if s.rootErr != nil {
		return nil, s.rootErr
	}
	return s, nil
}

func (c *Conn) readTextFile(p *readTextFileParams) (any, error) {
	s, err := c.sessionFor(p.SessionID)
	if err != nil {
		return nil, err
	}
	rel, err := s.rel(p.Path)
	if err != nil {
		return nil, err
	}
	b, err := s.root.ReadFile(rel)
	if err != nil {
		return nil, rootErr(err, p.Path)
	}
	content := string(b)
	if p.Line != nil || p.Limit != nil {
		content = sliceLines(content, p.Line, p.Limit)
	}
	return map[string]string{"content": content}, nil
}

func (c *Conn) writeTextFile(p *writeTextFileParams) error {
	s, err := c.sessionFor(p.SessionID)
	if err != nil {
		return err
	}
	rel, err := s.rel(p.Path)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			return rootErr(err, p.Path)
		}
	}
	if err := s.root.WriteFile(rel, []byte(p.Content), 0o644); err != nil {
		return rootErr(err, p.Path)
	}
	return nil
}

// rootErr turns os.Root's escape refusal into ErrOutsideRoot.
func rootErr(err error, path string) error {
	if strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w: %s", ErrOutsideRoot, path)
	}
	return err
}

// sliceLines returns limit lines starting at the 1-based line.
func sliceLines(s string, line, limit *int) string {
	lines := strings.SplitAfter(s, "\n")
	start := 0
	if line != nil && *line > 1 {
		start = min(*line-1, len(lines))
	}
	end := len(lines)
	if limit != nil && *limit >= 0 {
		end = min(start+*limit, len(lines))
	}
	return strings.Join(lines[start:end], "")
}
