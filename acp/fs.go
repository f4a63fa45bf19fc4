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
	"runtime"
	"strings"
	"syscall"

	"github.com/sourcegraph/jsonrpc2"
)

// serveFS answers fs/read_text_file and fs/write_text_file on a goroutine
// the Conn owns. Paths are confined to the session's working directory:
// ".." and symlinks that lead outside it are refused. Each request is
// given Options.FileTimeout, waits included, and may be withdrawn by the
// agent ($/cancel_request, answered -32800); a read looks through at most
// Options.MaxScanBytes of the file for its first line, and waits its turn
// (see scanSlot).
//
// The request has been admitted; it is released once answered.
func (c *Conn) serveFS(req *jsonrpc2.Request) {
	// Known from here, on the read loop, so that a withdrawal read after
	// it always finds it.
	ctx, cancel := context.WithCancelCause(context.Background())
	c.mu.Lock()
	c.waits[req.ID] = cancel
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		delete(c.waits, req.ID)
		c.mu.Unlock()
		cancel(nil)
	}
	started := c.spawn(func() {
		defer c.release(req)
		ctx, stop := context.WithTimeoutCause(ctx, c.opts.FileTimeout, fmt.Errorf(
			"%w: a file request is given %s, waiting for other reads included; it was stopped (ask for fewer lines, or try again)",
			errTooSlow, c.opts.FileTimeout))
		defer stop()
		var (
			result any
			err    error
		)
		switch req.Method {
		case MethodReadTextFile:
			var p readTextFileParams
			if err = decodeParams(req, &p); err == nil {
				result, err = c.readTextFile(ctx, &p)
			}
		case MethodWriteTextFile:
			var p writeTextFileParams
			if err = decodeParams(req, &p); err == nil {
				err = c.writeTextFile(ctx, &p)
				result = struct{}{}
			}
		}
		done()
		if err != nil {
			c.noisy.Warn().Str("error", logged(err.Error())).Str("method", logged(req.Method)).Msg("file request refused")
			err = c.rpc.ReplyWithError(context.Background(), req.ID, wireError(err))
		} else {
			err = c.rpc.Reply(context.Background(), req.ID, result)
		}
		if err != nil {
			c.log.Debug().Err(err).Msg("file reply not sent")
		}
	})
	if !started {
		done()
		c.release(req)
	}
}

// fileScans bounds the file reads the whole broker runs at once, so that
// agents asking for many cannot keep every core busy: with two cores or
// more, one is left to everything else.
var fileScans = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))

// scanSlot waits for the Conn's turn to read a file (one read of each
// agent at a time, so that one agent's flood does not hold up the
// others), then for one of the broker's (fileScans). The wait ends with
// ctx or the Conn; the function returned gives the slots back.
func (c *Conn) scanSlot(ctx context.Context) (release func(), err error) {
	var held []chan struct{}
	release = func() {
		for _, s := range held {
			<-s
		}
	}
	for _, slots := range []chan struct{}{c.scans, fileScans} {
		select {
		case slots <- struct{}{}:
			held = append(held, slots)
		case <-ctx.Done():
			release()
			return nil, context.Cause(ctx)
		case <-c.stop:
			release()
			return nil, ErrClosed
		}
	}
	return release, nil
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

func (c *Conn) readTextFile(ctx context.Context, p *readTextFileParams) (any, error) {
	s, err := c.sessionFor(p.SessionID)
	if err != nil {
		return nil, err
	}
	rel, err := s.rel(p.Path)
	if err != nil {
		return nil, err
	}
	release, err := c.scanSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	f, err := openRegular(s.root, rel, os.O_RDONLY)
	if err != nil {
		return nil, rootErr(err, p.Path)
	}
	defer f.Close()
	content, err := readLines(ctx, f, p.Line, p.Limit, c.opts.MaxReadBytes, c.opts.MaxScanBytes, c.stop)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	return map[string]string{"content": content}, nil
}

func (c *Conn) writeTextFile(ctx context.Context, p *writeTextFileParams) error {
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
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
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
// and an answer that would pass max is refused. It looks through at most
// maxScan bytes for the first line asked for, and stops when ctx ends or
// stop closes.
func readLines(ctx context.Context, r io.Reader, line, limit *int, max int, maxScan int64, stop <-chan struct{}) (string, error) {
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
	var skipped int64
	for n := 1; want != 0; {
		select {
		case <-stop:
			return "", ErrClosed
		case <-ctx.Done():
			return "", context.Cause(ctx)
		default:
		}
		frag, err := br.ReadSlice('\n')
		if n >= first && len(frag) > 0 {
			if out.Len()+len(frag) > max {
				return "", fmt.Errorf("%w: the text asked for is more than %d bytes; ask for fewer lines", errTooLarge, max)
			}
			out.Write(frag)
		} else if skipped += int64(len(frag)); skipped > maxScan {
			return "", fmt.Errorf("%w: line %d is not within the first %d bytes of the file, as far as a read looks for the line it starts at; ask for an earlier line, or read the file another way", errTooFar, first, maxScan)
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
