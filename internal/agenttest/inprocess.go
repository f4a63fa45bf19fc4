package agenttest

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/internal/fakeagent"
	"acpbroker/pool"
)

// InProcessOptions shape agents launched by InProcess.
type InProcessOptions struct {
	Agent fakeagent.Options
	// IgnoreTerm makes the stand-in for SIGTERM do nothing, so Stop has to
	// escalate to the kill.
	IgnoreTerm bool
	// LoseExit hides the exit from Exited (it never closes) while Alive
	// still tells the truth.
	LoseExit bool
	// HoldStdout keeps stdout open after the agent exits, as a descendant
	// holding the pipe would, until the Proc is killed. With LoseExit, only
	// a liveness check can notice the death.
	HoldStdout bool
}

var fakePIDs atomic.Int64

// InProcess returns a launcher that runs the fake agent on goroutines over
// pipes instead of in a process, for tests inside a testing/synctest
// bubble, where time is virtual. Everything it starts ends when the Proc
// is stopped or killed, or when the agent exits.
func InProcess(opts InProcessOptions) pool.Launcher {
	return func(spec pool.ProcessSpec) (pool.Proc, error) {
		p := &inproc{
			pid:    int(1_000_000 + fakePIDs.Add(1)),
			opts:   opts,
			exited: make(chan struct{}),
			reaped: make(chan struct{}),
			lost:   make(chan struct{}),
		}
		p.ctx, p.kill = context.WithCancel(context.Background())
		var term context.Context
		term, p.term = context.WithCancel(p.ctx)
		if opts.IgnoreTerm {
			term = p.ctx
		}
		p.stdinR, p.stdinW = io.Pipe()
		p.stdoutR, p.stdoutW = io.Pipe()
		agentOpts := opts.Agent
		agentOpts.PID = p.pid
		go func() {
			code := fakeagent.Serve(term, p.stdinR, p.stdoutW, &p.stderr, agentOpts)
			if p.ctx.Err() != nil && code == 137 {
				code = -1 // killed
			}
			p.mu.Lock()
			p.code = code
			p.mu.Unlock()
			if !opts.HoldStdout {
				p.stdoutW.Close()
			}
			p.stdinR.CloseWithError(io.ErrClosedPipe)
			close(p.exited)
		}()
		return p, nil
	}
}

type inproc struct {
	pid    int
	opts   InProcessOptions
	ctx    context.Context
	kill   context.CancelFunc
	term   context.CancelFunc
	stderr tailWriter

	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter

	exited, reaped, lost chan struct{}
	monitorOnce          sync.Once
	stopOnce             sync.Once

	mu   sync.Mutex
	code int
	err  error
}

var _ pool.Proc = (*inproc)(nil)

func (p *inproc) PID() int                { return p.pid }
func (p *inproc) Stdin() io.WriteCloser   { return p.stdinW }
func (p *inproc) Stdout() io.ReadCloser   { return p.stdoutR }
func (p *inproc) Reaped() <-chan struct{} { return p.reaped }
func (p *inproc) StderrTail() string      { return p.stderr.String() }

func (p *inproc) Exited() <-chan struct{} {
	if p.opts.LoseExit {
		return p.lost
	}
	return p.exited
}

func (p *inproc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *inproc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *inproc) Monitor(readerDone <-chan struct{}) {
	p.monitorOnce.Do(func() {
		go func() {
			defer close(p.reaped)
			<-p.exited
			t := time.NewTimer(2 * time.Second)
			defer t.Stop()
			select {
			case <-readerDone:
			case <-t.C:
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			what := fmt.Sprintf("agent exited with status %d", p.code)
			if p.code < 0 {
				what = "agent killed by signal killed"
			}
			if tail := strings.TrimSpace(p.stderr.String()); tail != "" {
				what += ": " + tail
			}
			p.err = fmt.Errorf("%s", what)
		}()
	})
}

func (p *inproc) Stop(grace time.Duration) {
	p.stopOnce.Do(func() {
		p.stdinW.Close()
		if !p.waitExit(grace) {
			p.term()
			if !p.waitExit(grace) {
				p.kill()
			}
		}
	})
	<-p.exited
	<-p.reaped
}

func (p *inproc) Kill() {
	p.kill()
	p.stdoutW.Close()
	p.Stop(0)
}

func (p *inproc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// tailWriter keeps the last 2 KiB written to it.
type tailWriter struct {
	mu  sync.Mutex
	buf []byte
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if over := len(w.buf) - 2048; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(b), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
