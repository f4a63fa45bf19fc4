// Package host serves an agent's requests for the machine it works on:
// its files (fs/read_text_file, fs/write_text_file), confined to each
// session's directory, and the commands it runs in terminals (terminal/*),
// in the agent's confinement. A Host is what an acp.Conn calls for them;
// it knows nothing of the connection.
package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"

	"github.com/rs/zerolog"
)

var _ acp.Host = (*Host)(nil)

// Options configure a Host. The zero value of every field has a usable
// default.
type Options struct {
	Logger zerolog.Logger
	// MaxReadBytes bounds the text one fs/read_text_file returns (default
	// 8 MiB); MaxWriteBytes what one fs/write_text_file writes (default
	// 16 MiB).
	MaxReadBytes  int
	MaxWriteBytes int
	// FileTimeout bounds one fs request, its wait for its turn to read
	// included (default 10s); MaxScanBytes how much of a file a read
	// looks through for the first line it asks for (default 256 MiB).
	FileTimeout  time.Duration
	MaxScanBytes int64
	// Terminal, if set, makes the Host serve terminals: it turns the
	// command a terminal/create asks for into the process started, giving
	// it the agent's environment, user and confinement; an error refuses
	// the terminal. It must not block.
	Terminal func(Command) (Command, error)
	// MaxTerminals bounds a session's open terminals (default 8); past it
	// terminal/create is refused. MaxTerminalBytes bounds the output one
	// terminal keeps (default 1 MiB), whatever its outputByteLimit.
	MaxTerminals, MaxTerminalBytes int
	// TerminalGrace is how long a terminal's process group is given
	// between SIGTERM and SIGKILL when it is killed (default 1s).
	TerminalGrace time.Duration
}

// Defaults of the Options bounds.
const (
	DefaultMaxReadBytes     = 8 << 20
	DefaultMaxWriteBytes    = 16 << 20
	DefaultFileTimeout      = 10 * time.Second
	DefaultMaxScanBytes     = 256 << 20
	DefaultMaxTerminals     = 8
	DefaultMaxTerminalBytes = 1 << 20
	DefaultTerminalGrace    = time.Second
)

// Host serves one agent's file and terminal requests. All methods are
// safe for concurrent use. Close ends every terminal and returns once
// they have ended.
type Host struct {
	log   zerolog.Logger
	opts  Options
	scans chan struct{} // the agent's file read being served (scanSlot)

	mu       sync.Mutex
	closed   bool
	sessions map[string]*workspace
	terms    map[string]*terminal // open terminals, by id
	termSeq  uint64
	released []*terminal // the last ones released, their output's end kept
	createMu sync.Mutex  // one terminal/create at a time

	wg sync.WaitGroup // KillTerminals' and ReleaseTerminals' kills
}

// New makes a Host with opts.
func New(opts Options) *Host {
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = DefaultMaxReadBytes
	}
	if opts.MaxWriteBytes <= 0 {
		opts.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if opts.FileTimeout <= 0 {
		opts.FileTimeout = DefaultFileTimeout
	}
	if opts.MaxScanBytes <= 0 {
		opts.MaxScanBytes = DefaultMaxScanBytes
	}
	if opts.MaxTerminals <= 0 {
		opts.MaxTerminals = DefaultMaxTerminals
	}
	if opts.MaxTerminalBytes <= 0 {
		opts.MaxTerminalBytes = DefaultMaxTerminalBytes
	}
	if opts.TerminalGrace <= 0 {
		opts.TerminalGrace = DefaultTerminalGrace
	}
	return &Host{
		log:      opts.Logger,
		opts:     opts,
		scans:    make(chan struct{}, 1),
		sessions: map[string]*workspace{},
		terms:    map[string]*terminal{},
	}
}

// workspace is a session's directory: its files are served through root,
// and no path outside cwd (or what it resolves to) is.
type workspace struct {
	cwd     string
	realCwd string
	root    *os.Root
	rootErr error
}

func openWorkspace(cwd string) *workspace {
	w := &workspace{cwd: filepath.Clean(cwd), realCwd: filepath.Clean(cwd)}
	if real, err := filepath.EvalSymlinks(cwd); err == nil {
		w.realCwd = real
	}
	w.root, w.rootErr = os.OpenRoot(cwd)
	return w
}

func (w *workspace) close() {
	if w.root != nil {
		_ = w.root.Close()
	}
}

// rel maps an absolute path the agent sent to a path relative to the
// session's root, refusing anything that is not inside it.
func (w *workspace) rel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: %q is not absolute", acp.ErrInvalidParams, p)
	}
	p = filepath.Clean(p)
	for _, base := range []string{w.cwd, w.realCwd} {
		if r, err := filepath.Rel(base, p); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w: %s", acp.ErrOutsideRoot, p)
}

// OpenSession makes the session's directory known: see acp.Host.
func (h *Host) OpenSession(id, cwd string) {
	w := openWorkspace(cwd)
	h.mu.Lock()
	old := h.sessions[id]
	h.sessions[id] = w
	h.mu.Unlock()
	if old != nil {
		old.close()
	}
}

// CloseSession forgets the session's directory; its terminals stay until
// released or the Host closes.
func (h *Host) CloseSession(id string) {
	h.mu.Lock()
	w := h.sessions[id]
	delete(h.sessions, id)
	h.mu.Unlock()
	if w != nil {
		w.close()
	}
}

func (h *Host) workspace(id string) (*workspace, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.sessions[id]
	if w == nil {
		return nil, fmt.Errorf("%w: %q", acp.ErrUnknownSession, id)
	}
	if w.rootErr != nil {
		return nil, w.rootErr
	}
	return w, nil
}

// Close ends every terminal at once and waits for them, and forgets the
// sessions: nothing a terminal started outlives the Host. Safe to call
// twice.
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	list := make([]*terminal, 0, len(h.terms))
	for id, t := range h.terms {
		list = append(list, t)
		delete(h.terms, id)
	}
	list = append(list, h.released...)
	h.released = nil
	sessions := h.sessions
	h.sessions = map[string]*workspace{}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range list {
		wg.Go(func() { t.kill(h.opts.TerminalGrace) })
	}
	wg.Wait()
	h.wg.Wait()
	for _, w := range sessions {
		w.close()
	}
	return nil
}

// spawn runs f on a goroutine Close waits for, unless the Host is
// closing. The Add happens under mu before Close can start waiting.
func (h *Host) spawn(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Go(f)
	return true
}
