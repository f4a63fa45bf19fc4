package pool

import (
	"io"
	"time"
)

// Proc is a running agent as the pool and its turns see it. *Process is
// the real one; tests may launch agents on goroutines instead.
type Proc interface {
	// PID identifies the process in logs (and is its process group).
	PID() int
	Stdin() io.WriteCloser
	Stdout() io.ReadCloser
	// Monitor starts reaping once the process exits; readerDone is closed
	// when the reader of Stdout has finished. Call it exactly once.
	Monitor(readerDone <-chan struct{})
	// Exited is closed as soon as the process has exited.
	Exited() <-chan struct{}
	// Reaped is closed once the process has been waited for.
	Reaped() <-chan struct{}
	// Alive asks the operating system whether the process still runs: the
	// liveness backstop to Exited.
	Alive() bool
	// ExitErr describes how the process ended; nil before Reaped.
	ExitErr() error
	// StderrTail is the end of what the process wrote to stderr.
	StderrTail() string
	// Stop ends the process with the escalation close stdin, wait grace,
	// SIGTERM the group, wait grace, SIGKILL the group, and returns once it
	// is reaped. Safe to call more than once and concurrently.
	Stop(grace time.Duration)
	// Kill is Stop without the graces.
	Kill()
}

// Launcher starts an agent process.
type Launcher func(ProcessSpec) (Proc, error)

// Exec launches real processes: StartProcess.
func Exec(spec ProcessSpec) (Proc, error) {
	p, err := StartProcess(spec)
	if err != nil {
		return nil, err
	}
	return p, nil
}
