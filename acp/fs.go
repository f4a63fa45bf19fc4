package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sourcegraph/jsonrpc2"
)

// serveFS answers fs/read_text_file and fs/write_text_file on a goroutine
// the Conn owns. Paths are confined to the session's working directory:
// ".." and symlinks that lead outside it are refused.
//
// The request has been admitted; it is released once answered.
func (c *Conn) serveFS(req *jsonrpc2.Request) {
	started := c.spawn(func() {
		defer c.release()
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
			c.noisy.Warn().Err(err).Str("method", req.Method).Msg("file request refused")
			err = c.rpc.ReplyWithError(context.Background(), req.ID, wireError(err))
		} else {
			err = c.rpc.Reply(context.Background(), req.ID, result)
		}
		if err != nil {
			c.log.Debug().Err(err).Msg("file reply not sent")
		}
	})
	if !started {
		c.release()
	}
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
	f, err := openRegular(s.root, rel, os.O_RDONLY)
	if err != nil {
		return nil, rootErr(err, p.Path)
	}
	defer f.Close()
	content, err := readLines(f, p.Line, p.Limit, c.opts.MaxReadBytes, c.stop)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	return map[string]string{"content": content}, nil
}

func (c *Conn) writeTextFile(p *writeTextFileParams) error {
	if len(p.Content) > c.opts.MaxWriteBytes {
		return fmt.Errorf("%w: %d bytes to write, more than the %d allowed", errTooLarge, len(p.Content), c.opts.MaxWriteBytes)
	}
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
	f, err := openRegular(s.root, rel, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return rootErr(err, p.Path)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteString(p.Content); err != nil {
		return err
	}
	return f.Close()
}

// openRegular opens a regular file without ever blocking in open: a named
// pipe, a device or a socket is refused, not waited on.
func openRegular(root *os.Root, rel string, flag int) (*os.File, error) {
	f, err := root.OpenFile(rel, flag|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		// Opening a pipe with no reader for writing, or a device
		// without its driver, fails so.
		return nil, fmt.Errorf("%w: %s is a named pipe or a device", errNotRegular, rel)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is a %s", errNotRegular, rel, fileKind(st.Mode()))
	}
	return f, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "special file"
	}
}

// readLines reads limit lines from the 1-based line (all when limit is
// nil) without holding more than max bytes: what is skipped is not kept,
// and an answer that would pass max is refused. It stops when stop closes.
func readLines(r io.Reader, line, limit *int, max int, stop <-chan struct{}) (string, error) {
	first := 1
	if line != nil && *line > 1 {
		first = *line
	}
	want := -1
	if limit != nil && *limit >= 0 {
		want = *limit
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var out strings.Builder
	for n := 1; want != 0; {
		select {
		case <-stop:
			return "", ErrClosed
		default:
		}
		frag, err := br.ReadSlice('\n')
		if n >= first && len(frag) > 0 {
			if out.Len()+len(frag) > max {
				return "", fmt.Errorf("%w: the text asked for is more than %d bytes; ask for fewer lines", errTooLarge, max)
			}
			out.Write(frag)
		}
		switch {
		case err == nil:
			if n >= first && want > 0 {
				want--
			}
			n++
		case errors.Is(err, bufio.ErrBufferFull):
			// the line goes on
		case errors.Is(err, io.EOF):
			return out.String(), nil
		default:
			return "", err
		}
	}
	return out.String(), nil
}

// rootErr turns os.Root's escape refusal into ErrOutsideRoot.
func rootErr(err error, path string) error {
	if IsPathEscape(err) {
		return fmt.Errorf("%w: %s", ErrOutsideRoot, path)
	}
	return err
}
