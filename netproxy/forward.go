package netproxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// ForwardArg is the first argument that makes a program that imports
// netproxy run as the forwarder:
//
//	PROGRAM <ForwardArg> --socket /PATH/proxy.sock --listen 127.0.0.1:3128 -- COMMAND ARGS...
const ForwardArg = "__acp-broker-net-forward"

// Bounds of the forwarder.
const (
	// forwardMaxConns is how many connections it relays at once (unless
	// --max-conns says); one past it is closed at once.
	forwardMaxConns = 512
	// forwardDialTimeout bounds connecting to the proxy's socket.
	forwardDialTimeout = 10 * time.Second
)

func init() {
	if len(os.Args) > 1 && os.Args[1] == ForwardArg {
		os.Exit(Forwarder(os.Args[2:]))
	}
}

// Forwarder runs the in-sandbox side with args (those after ForwardArg):
// it listens on --listen, relays each accepted connection to the Unix
// socket --socket (both directions, half-close kept, no per-connection
// state beyond the two connections), starts COMMAND (looked up in PATH
// from its own environment) as a child with the same stdin, stdout,
// stderr and environment, forwards SIGTERM, SIGINT and SIGHUP to it, and
// returns the child's exit status (128+signal if it was killed) once the
// child has exited, after closing every relayed connection. If it cannot
// listen, or the arguments are wrong, or COMMAND cannot start, it says
// why on stderr and returns 127 (126 if COMMAND is found but cannot run)
// without a child. At most 512 connections are relayed at once (or
// --max-conns); one more is closed as soon as it is accepted.
func Forwarder(args []string) int {
	fs := flag.NewFlagSet(ForwardArg, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	socket := fs.String("socket", "", "the proxy's Unix `socket`")
	listen := fs.String("listen", Listen, "the TCP `address` to listen on")
	maxConns := fs.Int("max-conns", forwardMaxConns, "how many connections to relay at once at most")
	if err := fs.Parse(args); err != nil {
		return 127
	}
	command := fs.Args()
	switch {
	case *socket == "":
		fmt.Fprintln(os.Stderr, "acp-broker network forwarder: --socket is required")
		return 127
	case len(command) == 0:
		fmt.Fprintln(os.Stderr, "acp-broker network forwarder: no command after --")
		return 127
	case *maxConns < 1:
		fmt.Fprintln(os.Stderr, "acp-broker network forwarder: --max-conns must be at least 1")
		return 127
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "acp-broker network forwarder: %v\n", err)
		return startStatus(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "acp-broker network forwarder: cannot listen on %s: %v\n", *listen, err)
		return 127
	}
	f := &forwarder{socket: *socket, ln: ln, max: *maxConns, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	cmd := exec.Command(path, command[1:]...)
	cmd.Args[0] = command[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		ln.Close()
		fmt.Fprintf(os.Stderr, "acp-broker network forwarder: cannot start %s: %v\n", command[0], err)
		return startStatus(err)
	}
	f.wg.Go(f.accept)

	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	for running := true; running; {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s)
		case <-exited:
			running = false
		}
	}
	f.close()
	return exitStatus(cmd.ProcessState, waitErr)
}

// startStatus is the status a shell gives a command that cannot start
// for err: 126 if it is there but may not be run, 127 otherwise.
func startStatus(err error) int {
	if errors.Is(err, os.ErrPermission) {
		return 126
	}
	return 127
}

// exitStatus is the status a shell would give a child that ended as st.
func exitStatus(st *os.ProcessState, err error) int {
	if st == nil {
		fmt.Fprintf(os.Stderr, "acp-broker network forwarder: %v\n", err)
		return 127
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// forwarder relays the connections accepted on ln to socket.
type forwarder struct {
	socket string
	ln     net.Listener
	max    int           // connections relayed at once at most
	done   chan struct{} // closed by close

	mu     sync.Mutex
	closed bool
	relays int                   // connections relayed now: at most max
	conns  map[net.Conn]struct{} // those and their connections to the socket
	wg     sync.WaitGroup
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors: give the relays a moment to end.
			t := time.NewTimer(acceptBackoff)
			select {
			case <-f.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		if !f.add(c, true) {
			c.Close()
			continue
		}
		f.wg.Go(func() { f.relay(c) })
	}
}

// add counts c as relayed (an accepted connection, if accepted, which
// needs room) or as a relay's connection to the socket; false if there is
// no room or the forwarder is closed.
func (f *forwarder) add(c net.Conn, accepted bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || accepted && f.relays >= f.max {
		return false
	}
	if accepted {
		f.relays++
	}
	f.conns[c] = struct{}{}
	return true
}

// remove closes c and forgets it.
func (f *forwarder) remove(c net.Conn, accepted bool) {
	c.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
	if accepted {
		f.relays--
	}
}

// relay passes c's bytes to a new connection to the socket and back.
func (f *forwarder) relay(c net.Conn) {
	defer f.remove(c, true)
	up, err := net.DialTimeout("unix", f.socket, forwardDialTimeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "acp-broker network forwarder: cannot reach the proxy: %v\n", err)
		return
	}
	if !f.add(up, false) {
		up.Close()
		return
	}
	defer f.remove(up, false)
	var wg sync.WaitGroup
	wg.Go(func() { halfCopy(up, c) })
	halfCopy(c, up)
	wg.Wait()
}

// halfCopy copies src to dst, then closes dst for writing; on an error it
// closes both.
func halfCopy(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
}

// close stops accepting, closes every relayed connection and waits for
// the relays.
func (f *forwarder) close() {
	close(f.done)
	f.ln.Close()
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
