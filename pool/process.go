package pool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"acpbroker/cgroup"
	"acpbroker/internal/bytesize"
	"acpbroker/internal/redact"
	"acpbroker/procgroup"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// ProcessSpec says how to start an agent process.
type ProcessSpec struct {
	Command string
	Args    []string
	Dir     string
	// Env is the complete environment of the process.
	Env []string
	// Logger receives the process's stderr, one entry per line.
	Logger zerolog.Logger
	// StderrLineMax caps one logged stderr line (default 2 KiB).
	StderrLineMax int
	// StderrTail is how many bytes of recent stderr are kept for error
	// messages (default 2 KiB).
	StderrTail int
	// Redact masks secret values in the stderr lines logged and kept.
	Redact *redact.Redactor
	// Credential, if set, is the user and group the process runs as.
	Credential *syscall.Credential
	// ExtraFiles are open files the process gets as descriptors 3 and
	// up. Whoever made the spec closes them once the process has
	// started, or has failed to.
	ExtraFiles []*os.File
	// Group, if set, is the control group the process runs in: it is
	// there before its program runs; what is left in the group is killed
	// once the process has exited; and ExitErr says when the group ran
	// out of memory. The caller removes the group.
	Group *cgroup.Group
	// Leftovers, if set, ends what the process may have left outside its
	// group (a sandbox's init); it runs once the process is reaped and
	// its group killed.
	Leftovers func()
}

// Process is a running agent in its own process group. Its exit is noticed
// as soon as it happens, without reaping it, so the owner can finish reading
// its stdout before Wait closes the pipe.
type Process struct {
	pid    int
	stdin  io.WriteCloser
	stdout io.ReadCloser

	log    zerolog.Logger
	redact *redact.Redactor
	cmd    *exec.Cmd
	group  *cgroup.Group // nil: none
	tail   *tail
	left   func()        // the spec's Leftovers, or nil
	exited chan struct{} // closed when the leader has exited (not yet reaped)
	reaped chan struct{} // closed after Wait and the final group kill
	stderr chan struct{} // closed when stderr has been drained

	monitorOnce sync.Once
	stopOnce    sync.Once
	stopping    atomic.Bool // Stop or Kill began: an end from then on is ours
	wg          sync.WaitGroup

	mu    sync.Mutex
	state *os.ProcessState
	err   error
}

// StartProcess starts the agent. The caller must call Monitor once it has a
// reader on Stdout, and Stop (or wait for Reaped) to release it.
func StartProcess(spec ProcessSpec) (*Process, error) {
	if spec.StderrLineMax <= 0 {
		spec.StderrLineMax = 2 << 10
	}
	if spec.StderrTail <= 0 {
		spec.StderrTail = 2 << 10
	}
	cmd := exec.Command(spec.Command, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential}
	entered, err := spec.Group.Prepare(cmd)
	if err != nil {
		return nil, err
	}
	defer entered()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Command, err)
	}
	p := &Process{
		pid:    cmd.Process.Pid,
		stdin:  stdin,
		stdout: stdout,
		log:    spec.Logger.With().Int("pid", cmd.Process.Pid).Logger(),
		cmd:    cmd,
		group:  spec.Group,
		tail:   &tail{max: spec.StderrTail},
		redact: spec.Redact,
		left:   spec.Leftovers,
		exited: make(chan struct{}),
		reaped: make(chan struct{}),
		stderr: make(chan struct{}),
	}
	p.wg.Go(func() { p.drainStderr(stderr, spec.StderrLineMax) })
	p.wg.Go(p.watchExit)
	return p, nil
}

var _ Proc = (*Process)(nil)

// PID is the process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// Stdin is the agent's standard input.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout is the agent's standard output.
func (p *Process) Stdout() io.ReadCloser { return p.stdout }

// Monitor starts the reaper: once the process has exited it kills the rest
// of its group, waits (bounded) for readerDone and the stderr drain, then
// reaps it. Call it exactly once, after a reader on Stdout exists.
func (p *Process) Monitor(readerDone <-chan struct{}) {
	p.monitorOnce.Do(func() {
		p.wg.Go(func() { p.reap(readerDone) })
	})
}

// Exited is closed as soon as the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Reaped is closed once the process has been waited for and its group
// killed; every goroutine of the Process has then finished or is finishing.
func (p *Process) Reaped() <-chan struct{} { return p.reaped }

// Alive reports whether the process is still running. It is the liveness
// backstop to Exited: it asks the kernel directly.
func (p *Process) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	if err := unix.Kill(p.pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return true // no /proc: kill(0) is the best we have
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// ExitErr describes how the process ended, with the tail of its stderr,
// for example "agent exited with status 3: fatal: out of tokens". It is nil
// before the process has been reaped.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// StderrTail returns the last bytes the process wrote to stderr.
func (p *Process) StderrTail() string { return p.tail.String() }

func (p *Process) watchExit() {
	defer close(p.exited)
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				p.log.Warn().Err(err).Msg("waitid failed; treating the agent as exited")
			}
			return
		}
	}
}

// ReapGrace bounds how long the reaper waits for the output readers after
// the process exited (a descendant that left the group may hold the pipes).
const ReapGrace = 2 * time.Second

func (p *Process) reap(readerDone <-chan struct{}) {
	defer close(p.reaped)
	<-p.exited
	procgroup.Signal(p.pid, syscall.SIGKILL, p.log)
	t := time.NewTimer(ReapGrace)
	defer t.Stop()
	for _, ch := range []<-chan struct{}{readerDone, p.stderr} {
		select {
		case <-ch:
		case <-t.C:
			p.log.Warn().Msg("agent output still open after exit; closing it")
		}
	}
	err := procgroup.Reap(p.cmd, p.log, func() {
		p.group.Kill()
		if p.left != nil {
			p.left()
		}
	})
	desc := describeExit(p.cmd.ProcessState, err, p.tail.String())
	if desc.Code != 0 && !p.stopping.Load() && p.group.OOMKills() > 0 {
		desc.OutOfMemory, desc.MemoryMax = true, p.group.Limits().MemoryMax
	}
	p.mu.Lock()
	p.state = p.cmd.ProcessState
	p.err = desc
	p.mu.Unlock()
	p.log.Info().Str("cause", desc.Error()).Msg("agent process ended")
}

// exitTailLines is how many of the last stderr lines an ExitError keeps:
// its text reaches people; the whole tail is in the log.
const exitTailLines = 5

func describeExit(st *os.ProcessState, waitErr error, tail string) *ExitError {
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	lines = lines[max(len(lines)-exitTailLines, 0):]
	e := &ExitError{State: st, Code: -1, Tail: strings.TrimSpace(strings.Join(lines, "\n")), WaitErr: waitErr}
	if st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal()
		}
	}
	return e
}

// ExitError is how an agent process ended: its exit status or the signal
// that killed it, and the tail of its stderr. Callers read the fields;
// Error is for people.
type ExitError struct {
	State   *os.ProcessState // nil when the process could not be waited for
	Code    int              // the exit status; -1 when killed by a signal or not waited for
	Signal  syscall.Signal   // the signal that killed it, or 0
	Tail    string           // the end of its stderr, trimmed
	WaitErr error            // why it could not be waited for, when State is nil
	// OutOfMemory: it ended in failure, not stopped by the broker, after
	// the kernel's OOM killer killed a process of its control group, for
	// the group's limit of MemoryMax bytes (0: for the machine's lack of
	// memory).
	OutOfMemory bool
	MemoryMax   int64
}

// How says how the process ended, without the stderr: "exited with
// status 3", "killed by signal killed", "ran out of memory (limit 4 GiB)".
func (e *ExitError) How() string {
	switch {
	case e.OutOfMemory && e.MemoryMax > 0:
		return fmt.Sprintf("ran out of memory (limit %s)", bytesize.Format(e.MemoryMax))
	case e.OutOfMemory:
		return "ran out of memory (the machine's)"
	case e.State == nil:
		return fmt.Sprintf("could not be waited for: %v", e.WaitErr)
	case e.Signal != 0:
		return fmt.Sprintf("killed by signal %s", e.Signal)
	case e.State.Exited():
		return fmt.Sprintf("exited with status %d", e.Code)
	default:
		return "ended: " + e.State.String()
	}
}

// Error is "agent exited with status 3: <stderr tail>", or "the agent
// ran out of memory (limit 4 GiB)": the kernel's kill, which its stderr
// does not explain.
func (e *ExitError) Error() string {
	if e.OutOfMemory {
		return "the agent " + e.How()
	}
	if e.Tail == "" {
		return "agent " + e.How()
	}
	return "agent " + e.How() + ": " + e.Tail
}

// Stop ends the process with an escalation: close stdin, wait grace for it
// to exit, SIGTERM the group, wait grace, SIGKILL the group; with no grace,
// close stdin and SIGKILL the group at once. It returns when
// the process has been reaped and its goroutines are gone. Safe to call
// more than once and concurrently; Monitor must have been called.
func (p *Process) Stop(grace time.Duration) {
	p.stopping.Store(true)
	p.stopOnce.Do(func() {
		_ = p.stdin.Close()
		if grace <= 0 {
			procgroup.Signal(p.pid, syscall.SIGKILL, p.log)
			return
		}
		if !procgroup.Wait(p.exited, grace) {
			p.log.Info().Dur("grace", grace).Msg("agent still running after stdin closed; sending SIGTERM to its group")
			procgroup.Stop(p.pid, p.exited, grace, p.log, "agent")
		}
	})
	<-p.reaped
	p.wg.Wait()
}

// Kill sends SIGKILL to the group at once (also when a Stop is under way)
// and waits until it is reaped.
func (p *Process) Kill() {
	p.stopping.Store(true)
	procgroup.Signal(p.pid, syscall.SIGKILL, p.log)
	p.Stop(0)
}

// stderrBurst is how many of an agent's stderr lines a second reach the
// log: an agent cannot flood it (and through it the journal's rate
// limit, which would drop the broker's other lines too). All of them
// reach the tail kept for errors.
const stderrBurst = 100

// drainStderr turns the agent's stderr into log lines: each capped at max
// bytes, at most stderrBurst a second, all of them fed to the tail.
func (p *Process) drainStderr(r io.Reader, max int) {
	defer close(p.stderr)
	log := p.log.Sample(&zerolog.BurstSampler{Burst: stderrBurst, Period: time.Second})
	br := bufio.NewReaderSize(r, 4096)
	var line []byte
	truncated := false
	flush := func() {
		if len(line) == 0 && !truncated {
			return
		}
		ev := log.Info().Str("stream", "stderr")
		if truncated {
			ev = ev.Bool("truncated", true)
		}
		text := p.redact.String(string(line))
		ev.Msg(text)
		p.tail.Write([]byte(text))
		line, truncated = line[:0], false
	}
	for {
		frag, err := br.ReadSlice('\n')
		frag = []byte(strings.TrimRight(string(frag), "\r\n"))
		if room := max - len(line); room > 0 {
			line = append(line, frag[:min(room, len(frag))]...)
			if len(frag) > room {
				truncated = true
			}
		} else if len(frag) > 0 {
			truncated = true
		}
		switch {
		case err == nil:
			flush()
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			flush()
			return
		}
	}
}

// tail keeps the last max bytes of stderr, whole lines where possible.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, line...)
	t.buf = append(t.buf, '\n')
	if over := len(t.buf) - t.max; over > 0 {
		cut := over
		if i := strings.IndexByte(string(t.buf[over:]), '\n'); i >= 0 && over+i+1 < len(t.buf) {
			cut = over + i + 1
		}
		t.buf = append(t.buf[:0], t.buf[cut:]...)
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
