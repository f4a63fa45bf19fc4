// Package auditsock serves a running broker's audit trail on a unix
// socket in its state directory, to its own user outside any sandbox,
// and asks a running broker for it: the state file itself is locked
// while the broker runs.
package auditsock

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"acpbroker/store"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// SocketName is the unix socket in state.dir on which a running
// broker serves its audit trail to `broker audit`: the database itself is
// locked while the broker runs. The state directory is hidden from
// sandboxed agents; the socket is the broker user's alone (mode 0600),
// a peer of another user (root aside) is refused, and so is a peer in
// another user namespace than the broker's: a sandboxed agent, even one
// that reached the socket.
const SocketName = "audit.sock"

// Bounds of the audit socket: connections served at once (more are told
// to try again), the whole exchange of one, and its request line.
const (
	auditMaxConns     = 4
	auditConnTimeout  = 30 * time.Second
	auditMaxRequest   = 4 << 10
	auditMaxReplySize = 1 << 30
)

// auditRequest is what `broker audit` asks: one JSON line.
type auditRequest struct {
	Since  time.Time `json:"since"`
	Thread string    `json:"thread,omitempty"`
	// Runs asks for the schedules' runs instead, of Schedule ("": all).
	Runs     bool   `json:"runs,omitempty"`
	Schedule string `json:"schedule,omitempty"`
}

// auditReply is the broker's answer: one JSON document, the decisions or
// why there are none.
type auditReply struct {
	Decisions []store.Decision    `json:"decisions"`
	Runs      []store.ScheduleRun `json:"runs,omitempty"`
	Error     string              `json:"error,omitempty"`
}

// Server serves the audit trail on the socket. Close stops it and
// returns once every connection's goroutine has ended.
type Server struct {
	ln        *net.UnixListener
	path      string
	decisions func(store.DecisionFilter) ([]store.Decision, error)
	runs      func(store.RunFilter) ([]store.ScheduleRun, error) // nil: none served
	log       zerolog.Logger
	uid       int
	userNS    string // the broker's user namespace, as /proc names it

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	closed  bool
	servers chan struct{} // a slot per connection served
}

// Serve listens on dir/audit.sock, created with mode 0600 from the
// start (made in a private directory and moved into place, replacing a
// socket a broker that died left), and serves decisions on it.
func Serve(dir string, decisions func(store.DecisionFilter) ([]store.Decision, error), log zerolog.Logger) (*Server, error) {
	private, err := os.MkdirTemp(dir, ".a") // short: a socket path is at most 107 bytes
	if err != nil {
		return nil, fmt.Errorf("audit socket: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("audit socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // it is moved; Close removes it where it is
	path := filepath.Join(dir, SocketName)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("audit socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("audit socket: %w", err)
	}
	userNS, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("audit socket: %w", err)
	}
	s := &Server{ln: ln, path: path, decisions: decisions, log: log, uid: os.Getuid(), userNS: userNS,
		conns: map[net.Conn]bool{}, servers: make(chan struct{}, auditMaxConns)}
	s.wg.Go(s.accept)
	return s, nil
}

func (s *Server) accept() {
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if !closed {
				s.log.Warn().Err(err).Msg("audit socket: accept failed; no longer served")
			}
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = true
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, conn)
				s.mu.Unlock()
				conn.Close()
			}()
			s.serve(conn)
		})
	}
}

// serve answers one connection, within auditConnTimeout.
func (s *Server) serve(conn *net.UnixConn) {
	conn.SetDeadline(time.Now().Add(auditConnTimeout))
	reply := func(r auditReply) {
		if err := json.NewEncoder(conn).Encode(r); err != nil {
			s.log.Debug().Err(err).Msg("audit socket: reply not sent")
		}
	}
	// The request is read before any refusal, a peer's too: a connection
	// closed on a request not yet read makes the asker's write fail, and
	// the refusal never reach it. The peer is who connected, whatever it
	// writes.
	line, readErr := bufio.NewReader(io.LimitReader(conn, auditMaxRequest)).ReadBytes('\n')
	cred, err := peerCred(conn)
	if err != nil || (int(cred.Uid) != s.uid && cred.Uid != 0) {
		uid := -1
		if cred != nil {
			uid = int(cred.Uid)
		}
		s.log.Warn().Err(err).Int("peer_uid", uid).Msg("audit socket: peer of another user refused")
		reply(auditReply{Error: "refused: the audit trail is for the broker's own user"})
		return
	}
	if ns, err := peerUserNS(cred.Pid); err != nil || ns != s.userNS {
		s.log.Warn().Err(err).Int32("peer_pid", cred.Pid).Str("peer_userns", ns).Msg("audit socket: peer in another user namespace (a sandbox) refused")
		reply(auditReply{Error: "refused: the audit trail is not served into a sandbox"})
		return
	}
	var req auditRequest
	if readErr != nil || json.Unmarshal(line, &req) != nil {
		reply(auditReply{Error: "the request is not one JSON line"})
		return
	}
	select {
	case s.servers <- struct{}{}:
		defer func() { <-s.servers }()
	default:
		reply(auditReply{Error: "busy: too many audit requests at once; try again"})
		return
	}
	if req.Runs {
		s.mu.Lock()
		runs := s.runs
		s.mu.Unlock()
		if runs == nil {
			reply(auditReply{Error: "this broker keeps no schedule runs"})
			return
		}
		list, err := runs(store.RunFilter{Since: req.Since, Schedule: req.Schedule})
		if err != nil {
			reply(auditReply{Error: err.Error()})
			return
		}
		reply(auditReply{Decisions: []store.Decision{}, Runs: list})
		return
	}
	list, err := s.decisions(store.DecisionFilter{Since: req.Since, Thread: req.Thread})
	if err != nil {
		reply(auditReply{Error: err.Error()})
		return
	}
	if list == nil {
		list = []store.Decision{}
	}
	reply(auditReply{Decisions: list})
}

// peerUserNS is the user namespace of the process pid, as /proc names
// it.
func peerUserNS(pid int32) (string, error) {
	if pid <= 0 {
		return "", errors.New("the peer is not in the broker's PID namespace")
	}
	return os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
}

// peerCred is the process at the other end as it connected: its pid
// (in the broker's PID namespace; 0 if it is not there) and user.
func peerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// Close stops serving, ends open connections, removes the socket and
// waits for every goroutine. Safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
	os.Remove(s.path)
}

// ServeRuns serves the schedules' runs too (AskRuns).
func (s *Server) ServeRuns(runs func(store.RunFilter) ([]store.ScheduleRun, error)) {
	s.mu.Lock()
	s.runs = runs
	s.mu.Unlock()
}

// AskRuns asks the broker running on dir for the schedule runs f
// selects, within ctx.
func AskRuns(ctx context.Context, dir string, f store.RunFilter) ([]store.ScheduleRun, error) {
	r, err := ask(ctx, dir, auditRequest{Since: f.Since, Runs: true, Schedule: f.Schedule})
	if err != nil {
		return nil, err
	}
	return r.Runs, nil
}

// ErrNoSocket: no running broker answers on the state directory's audit
// socket.
var ErrNoSocket = errors.New("no broker answers on its audit socket")

// Ask asks the broker running on dir for the decisions f selects, within
// ctx.
func Ask(ctx context.Context, dir string, f store.DecisionFilter) ([]store.Decision, error) {
	r, err := ask(ctx, dir, auditRequest{Since: f.Since, Thread: f.Thread})
	if err != nil {
		return nil, err
	}
	return r.Decisions, nil
}

// ask sends one request to the broker running on dir.
func ask(ctx context.Context, dir string, req auditRequest) (*auditReply, error) {
	path := filepath.Join(dir, SocketName)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("%w (%s): %w", ErrNoSocket, path, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return nil, fmt.Errorf("audit socket %s: %w", path, err)
	}
	var r auditReply
	if err := json.NewDecoder(io.LimitReader(conn, auditMaxReplySize)).Decode(&r); err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("audit socket %s: %w", path, err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("the running broker: %s", r.Error)
	}
	return &r, nil
}
