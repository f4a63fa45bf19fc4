package host

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/cgroup"
	"acpbroker/procgroup"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Command is the process behind a terminal. The Host fills it from a
// terminal/create request (Dir inside the session's directory, Env the
// request's variables as NAME=value); Options.Terminal turns it into what
// is started.
type Command struct {
	// Path is the program; without a slash it is looked up in Env's PATH.
	Path string
	// Args are the arguments after the program's name.
	Args []string
	Dir  string
	// Env is the complete environment of the process.
	Env []string
	// Credential, if set, is the user and group the process runs as.
	Credential *syscall.Credential
	// ExtraFiles are open files the process gets as descriptors 3 and
	// up. The Host closes them once the process has started, or has
	// failed to.
	ExtraFiles []*os.File
	// Group, if set, is the control group it runs in (its agent's), from
	// before its program runs.
	Group *cgroup.Group
	// Leftovers, if set, ends what the command may have left outside its
	// group (a sandbox's init); it runs once the command is reaped and its
	// group killed.
	Leftovers func()
}

// Terminals' fixed bounds.
const (
	terminalDrainGrace       = 2 * time.Second
	releasedTerminalBytes    = 4 << 10
	releasedTerminalsKept    = 16
	terminalReadBufferBytes  = 32 << 10
	maxTerminalArgs          = 4096
	maxTerminalRequestString = 1 << 20 // bytes of a command, its arguments and environment
)

// terminal is one command started for an agent, in its own session and
// process group. It owns two goroutines: the reader of its output and the
// waiter, which reaps it.
type terminal struct {
	id, session string
	pid         int
	log         zerolog.Logger
	cmd         *exec.Cmd
	leftovers   func() // the command's Leftovers, or nil
	out         *outputBuffer

	exited chan struct{} // closed once reaped, its group killed, its output read
	status acp.TerminalExitStatus

	killOnce sync.Once
	wg       sync.WaitGroup
}

// startTerminal starts cmd with its output, stdout and stderr together,
// kept up to limit bytes.
func startTerminal(id, session string, cmd Command, limit int, log zerolog.Logger) (*terminal, error) {
	defer func() {
		for _, f := range cmd.ExtraFiles {
			f.Close() // the child has its own copies
		}
	}()
	path := cmd.Path
	if !strings.Contains(path, "/") {
		found, err := lookPath(path, cmd.Env)
		if err != nil {
			return nil, err
		}
		path = found
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	env := cmd.Env
	if env == nil {
		env = []string{}
	}
	c := &exec.Cmd{
		Path:       path,
		Args:       append([]string{cmd.Path}, cmd.Args...),
		Dir:        cmd.Dir,
		Env:        env,
		Stdout:     w,
		Stderr:     w,
		ExtraFiles: cmd.ExtraFiles,
		// A session of its own, so its process group is its own too: the
		// whole group is signalled, grandchildren included.
		SysProcAttr: &syscall.SysProcAttr{Setsid: true, Credential: cmd.Credential},
	}
	entered, err := cmd.Group.Prepare(c)
	if err == nil {
		err = c.Start()
		entered()
	}
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: %s: %v", errTerminalStart, cmd.Path, err)
	}
	t := &terminal{
		id: id, session: session, pid: c.Process.Pid, cmd: c, leftovers: cmd.Leftovers,
		log:    log.With().Str("terminal", id).Int("pid", c.Process.Pid).Logger(),
		out:    &outputBuffer{limit: limit},
		exited: make(chan struct{}),
	}
	read := make(chan struct{})
	t.wg.Go(func() {
		defer close(read)
		defer r.Close()
		buf := make([]byte, terminalReadBufferBytes)
		for {
			n, err := r.Read(buf)
			t.out.write(buf[:n])
			if err != nil {
				return
			}
		}
	})
	t.wg.Go(func() { t.reap(r, read) })
	t.log.Debug().Str("command", cmd.Path).Msg("terminal started")
	return t, nil
}

// reap waits for the command, kills what is left of its group, and
// finishes reading its output: a descendant that left the group may hold
// the pipe, so the read is given terminalDrainGrace, then cut.
func (t *terminal) reap(r *os.File, read <-chan struct{}) {
	defer close(t.exited)
	_ = procgroup.Reap(t.cmd, t.log, t.leftovers)
	timer := time.NewTimer(terminalDrainGrace)
	defer timer.Stop()
	select {
	case <-read:
	case <-timer.C:
		t.log.Warn().Msg("terminal output still open after its command ended; closing it")
		r.Close()
		<-read
	}
	t.status = exitStatus(t.cmd.ProcessState)
	t.log.Debug().Str("status", t.status.String()).Msg("terminal ended")
}

func exitStatus(st *os.ProcessState) acp.TerminalExitStatus {
	var s acp.TerminalExitStatus
	if st == nil {
		return s
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = ws.Signal().String()
		}
		s.Signal = &name
		return s
	}
	code := st.ExitCode()
	s.ExitCode = &code
	return s
}

// kill ends the command with an escalation: SIGTERM to its process group,
// grace to exit, SIGKILL to the group (which the reaper sends again once
// the leader is reaped). It returns once the terminal has ended. Safe to
// call more than once and concurrently.
func (t *terminal) kill(grace time.Duration) {
	t.killOnce.Do(func() {
		if !procgroup.Wait(t.exited, 0) {
			procgroup.Stop(t.pid, t.exited, grace, t.log, "terminal")
		}
	})
	<-t.exited
	t.wg.Wait()
}

// end kills a released terminal and keeps only the end of its output.
func (t *terminal) end(grace time.Duration) {
	t.kill(grace)
	t.out.shrink(releasedTerminalBytes)
}

// snapshot is the terminal's output so far (its last tail bytes; all when
// tail < 0), and its exit once ended.
func (t *terminal) snapshot(tail int) acp.TerminalOutput {
	out, truncated, written := t.out.get(tail)
	o := acp.TerminalOutput{ID: t.id, Output: out, Truncated: truncated, Written: written}
	select {
	case <-t.exited:
		st := t.status
		o.Exit = &st
	default:
	}
	return o
}

// outputBuffer keeps the last limit bytes written, read from a UTF-8
// character boundary. It is a ring: once full, each write overwrites the
// oldest bytes in place, so keeping the end of a command that never
// stops printing costs a copy of each byte once, whatever the limit.
// Its memory grows with what is written, up to limit.
type outputBuffer struct {
	mu        sync.Mutex
	limit     int
	buf       []byte // len(buf) < limit: bytes in order; == limit: a ring
	start     int    // where the oldest byte is, once full
	truncated bool
	written   int64
	copied    int64 // bytes copied into buf, growth included: the cost
}

func (b *outputBuffer) write(p []byte) {
	if len(p) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.written += int64(len(p))
	if b.limit <= 0 {
		b.truncated = true
		return
	}
	if len(p) > b.limit {
		p = p[len(p)-b.limit:]
		b.truncated = true
	}
	if room := b.limit - len(b.buf); room > 0 {
		n := min(room, len(p))
		b.grow(len(b.buf) + n)
		b.buf = append(b.buf, p[:n]...)
		b.copied += int64(n)
		p = p[n:]
	}
	for len(p) > 0 {
		// Full: overwrite the oldest bytes.
		n := copy(b.buf[b.start:], p)
		b.copied += int64(n)
		b.start = (b.start + n) % len(b.buf)
		p = p[n:]
		b.truncated = true
	}
}

// grow makes room for n bytes, doubling up to the limit.
func (b *outputBuffer) grow(n int) {
	if n <= cap(b.buf) {
		return
	}
	c := min(max(2*cap(b.buf), n, 4<<10), b.limit)
	nb := make([]byte, len(b.buf), c)
	b.copied += int64(copy(nb, b.buf))
	b.buf = nb
}

// lastLocked returns the last n bytes kept (all, if fewer), in order,
// as a new slice, and whether anything before them was dropped.
func (b *outputBuffer) lastLocked(n int) ([]byte, bool) {
	size := len(b.buf)
	dropped := b.truncated
	if n < 0 || n >= size {
		n = size
	} else {
		dropped = true
	}
	out := make([]byte, 0, n)
	switch {
	case n == 0:
	case size < b.limit || b.start == 0:
		out = append(out, b.buf[size-n:]...)
	default:
		// Oldest at start: the last n end just before it.
		from := (b.start + size - n) % size
		if from < b.start {
			out = append(out, b.buf[from:b.start]...)
		} else {
			out = append(append(out, b.buf[from:]...), b.buf[:b.start]...)
		}
	}
	if dropped {
		// Begin at a character's start: drop the rest of one cut in two.
		i := 0
		for i < utf8.UTFMax-1 && i < len(out) && !utf8.RuneStart(out[i]) {
			i++
		}
		out = out[i:]
	}
	return out, dropped
}

// shrink keeps only the last max bytes, giving the rest of the memory
// back; the buffer then keeps at most max.
func (b *outputBuffer) shrink(max int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept, dropped := b.lastLocked(max)
	b.buf, b.start, b.limit = kept, 0, max
	b.truncated = b.truncated || dropped
}

// get returns the last tail bytes kept (all when tail < 0), from a
// character's start, whether anything before them was dropped, and how
// many bytes were written in all.
func (b *outputBuffer) get(tail int) (string, bool, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out, dropped := b.lastLocked(tail)
	return string(out), dropped, b.written
}

// lookPath finds name in the PATH of env, as the command's own shell
// would.
func lookPath(name string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "PATH" {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s: not found in the PATH", errTerminalStart, name)
}
