package host

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"acpbroker/acp"
)

// ReadTextFile answers fs/read_text_file: the lines asked for of a
// file inside the session's directory (".." and symbolic links that lead
// outside it are refused). It is given Options.FileTimeout, its wait for
// its turn included; it looks through at most Options.MaxScanBytes of the
// file for its first line, and waits its turn (see scanSlot and
// slotReader).
func (h *Host) ReadTextFile(ctx context.Context, p *acp.ReadTextFileParams) (*acp.ReadTextFileResult, error) {
	ctx, stop := h.fileTimeout(ctx)
	defer stop()
	content, err := h.readTextFile(ctx, p)
	if err != nil {
		return nil, err
	}
	return &acp.ReadTextFileResult{Content: content}, nil
}

// WriteTextFile answers fs/write_text_file: the file, inside the
// session's directory, is made or replaced with the content, of at most
// Options.MaxWriteBytes. It is given Options.FileTimeout.
func (h *Host) WriteTextFile(ctx context.Context, p *acp.WriteTextFileParams) error {
	ctx, stop := h.fileTimeout(ctx)
	defer stop()
	return h.writeTextFile(ctx, p)
}

func (h *Host) fileTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, h.opts.FileTimeout, fmt.Errorf(
		"%w: a file request is given %s, waiting for other reads included; it was stopped (ask for fewer lines, or try again)",
		errTooSlow, h.opts.FileTimeout))
}

// fileScans bounds the file reads the whole broker runs at once past
// their first buffer, so that agents asking for many cannot keep every
// core busy: with two cores or more, one is left to everything else.
var fileScans = newReadSlots(max(1, runtime.GOMAXPROCS(0)-1))

// freeScan is how much of a file a read takes before it needs one of the
// broker's slots: a small file is read at once, whatever other agents
// read, at a cost no greater than answering any other request (each agent
// reads one file at a time).
const freeScan = 64 << 10

// scanSlot waits for the Host's turn to read a file: one read of each
// agent at a time, so that one agent's flood holds up only itself. The
// wait ends with ctx; the function returned gives the turn back.
func (h *Host) scanSlot(ctx context.Context) (release func(), err error) {
	select {
	case h.scans <- struct{}{}:
		return func() { <-h.scans }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// readSlots shares a number of slots between the reads that want one, in
// the order they asked. All methods are safe for concurrent use.
type readSlots struct {
	size int
	mu   sync.Mutex
	free int
	// waiting are the reads waiting for a slot, first come first; a slot
	// is given by closing the channel. At most one read of each Host
	// waits (scanSlot).
	waiting []chan struct{}
}

func newReadSlots(n int) *readSlots { return &readSlots{size: n, free: n} }

// take waits for a slot until ctx ends; a read that finds others waiting
// queues behind them.
func (s *readSlots) take(ctx context.Context) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	given := make(chan struct{})
	s.waiting = append(s.waiting, given)
	s.mu.Unlock()
	var err error
	select {
	case <-given:
		return nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.Index(s.waiting, given); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		return err
	}
	// Given as the wait ended: passed on.
	s.putLocked()
	return err
}

// put gives a slot back: to the read waiting longest, if any.
func (s *readSlots) put() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked()
}

func (s *readSlots) putLocked() {
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	close(s.waiting[0])
	s.waiting[0] = nil
	s.waiting = s.waiting[1:]
}

// wanted says whether a read waits for a slot.
func (s *readSlots) wanted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting) > 0
}

// slotReader reads a file for one request: its first freeScan bytes at
// once, and the rest holding one of the broker's slots, taken in turn
// with the other reads: while another waits, the slot is given up after
// each read from the file and waited for again behind it. So a slow read
// (a huge file, a slow file system) holds up the others by one buffer at
// most, not by the whole of it. release gives back the slot it holds.
type slotReader struct {
	r     io.Reader
	slots *readSlots
	ctx   context.Context
	free  int
	held  bool
}

func (r *slotReader) Read(p []byte) (int, error) {
	if r.free > 0 {
		if len(p) > r.free {
			p = p[:r.free]
		}
		n, err := r.r.Read(p)
		r.free -= n
		return n, err
	}
	if r.held && r.slots.wanted() {
		r.release()
	}
	if !r.held {
		if err := r.slots.take(r.ctx); err != nil {
			return 0, err
		}
		r.held = true
	}
	return r.r.Read(p)
}

func (r *slotReader) release() {
	if r.held {
		r.held = false
		r.slots.put()
	}
}

func (h *Host) readTextFile(ctx context.Context, p *acp.ReadTextFileParams) (string, error) {
	s, err := h.workspace(p.SessionID)
	if err != nil {
		return "", err
	}
	rel, err := s.rel(p.Path)
	if err != nil {
		return "", err
	}
	release, err := h.scanSlot(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	f, err := openRegular(s.root, rel, os.O_RDONLY)
	if err != nil {
		return "", rootErr(err, p.Path)
	}
	defer f.Close()
	shared := &slotReader{r: f, slots: fileScans, ctx: ctx, free: freeScan}
	defer shared.release()
	content, err := readLines(ctx, shared, p.Line, p.Limit, h.opts.MaxReadBytes, h.opts.MaxScanBytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Path, err)
	}
	return content, nil
}

func (h *Host) writeTextFile(ctx context.Context, p *acp.WriteTextFileParams) error {
	if len(p.Content) > h.opts.MaxWriteBytes {
		return fmt.Errorf("%w: %d bytes to write, more than the %d allowed", errTooLarge, len(p.Content), h.opts.MaxWriteBytes)
	}
	s, err := h.workspace(p.SessionID)
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
// maxScan bytes for the first line asked for, and stops when ctx ends.
func readLines(ctx context.Context, r io.Reader, line, limit *int, max int, maxScan int64) (string, error) {
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
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
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

// rootErr turns os.Root's escape refusal into acp.ErrOutsideRoot.
func rootErr(err error, path string) error {
	if acp.IsPathEscape(err) {
		return fmt.Errorf("%w: %s", acp.ErrOutsideRoot, path)
	}
	return err
}

// The ways a request can ask what it may not.
var (
	errNotRegular = acp.ParamsError("not a regular file")
	errTooLarge   = acp.ParamsError("too large")
	errTooFar     = acp.ParamsError("too far into the file")
	errTooSlow    = errors.New("took too long")
)
