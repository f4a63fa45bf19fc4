// Package brokersock serves what a running broker tells its own user,
// on a unix socket in its state directory: its audit trail (the state
// file itself is locked while the broker runs) and its status. It asks
// a running broker for them too. The socket answers the broker's own
// user (and root) outside any sandbox, and no one else.
package brokersock

import (
	"bufio"
	"bytes"
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

// SocketName is the unix socket in state.dir on which a running broker
// answers `broker audit` and `broker status`. The state directory is
// hidden from sandboxed agents; the socket is the broker user's alone
// (mode 0600), a peer of another user (root aside) is refused, and so
// is a peer in another user namespace than the broker's: a sandboxed
// agent, even one that reached the socket. An asker shows its user
// namespace by sending a descriptor of it with its request, which no
// process in a namespace below the broker's can open; without one, the
// broker reads the peer's in /proc, which it cannot when the peer is
// not dumpable (as the broker's own commands are) and the broker is
// not root.
const SocketName = "broker.sock"

// legacySocketName is the socket an earlier broker served its audit
// trail on alone; one a killed broker left is removed.
const legacySocketName = "audit.sock"

// Bounds of the socket: connections served at once (more are told to
// try again), the whole exchange of one, its request line, and an
// answer as the asker reads it.
const (
	maxConns     = 4
	connTimeout  = 30 * time.Second
	maxRequest   = 4 << 10
	maxReplySize = 1 << 30
)

// What a request asks for.
const (
	askAudit  = "audit" // also a request that names nothing, as `broker audit` asked first
	askStatus = "status"
	askRuns   = "runs"
)

// request is what `broker audit` or `broker status` asks: one JSON line.
type request struct {
	Ask    string    `json:"ask,omitempty"`
	Since  time.Time `json:"since"`
	Thread string    `json:"thread,omitempty"`
	// Schedule narrows the runs asked for to one schedule's ("": all).
	Schedule string `json:"schedule,omitempty"`
}

// reply is the broker's answer: one JSON document, what was asked for
// or why it is not there.
type reply struct {
	Decisions []store.Decision    `json:"decisions"`
	Runs      []store.ScheduleRun `json:"runs,omitempty"`
	Status    json.RawMessage     `json:"status,omitempty"`
	Error     string              `json:"error,omitempty"`
}

// Answers are what the socket serves. Decisions selects from the audit
// trail; Runs from the schedules' runs (nil: none kept); Status
// describes the broker now, as a value that encodes as JSON. Each may be
// called from several goroutines at once.
type Answers struct {
	Decisions func(store.DecisionFilter) ([]store.Decision, error)
	Runs      func(store.RunFilter) ([]store.ScheduleRun, error)
	Status    func() any
}

// Server serves Answers on the socket. Close stops it and returns once
// every connection's goroutine has ended.
type Server struct {
	ln      *net.UnixListener
	path    string
	answers Answers
	log     zerolog.Logger
	uid     int
	userNS  string // the broker's user namespace, as /proc names it
	// userNSID is that namespace's file's device and inode, which a
	// descriptor an asker sends must have.
	userNSID [2]uint64

	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
	closed  bool
	servers chan struct{} // a slot per connection served
}

// Serve listens on dir/broker.sock, created with mode 0600 from the
// start (made in a private directory and moved into place, replacing a
// socket a broker that died left), and serves a on it.
func Serve(dir string, a Answers, log zerolog.Logger) (*Server, error) {
	if fi, err := os.Lstat(filepath.Join(dir, legacySocketName)); err == nil && fi.Mode()&os.ModeSocket != 0 {
		os.Remove(filepath.Join(dir, legacySocketName))
	}
	private, err := os.MkdirTemp(dir, ".a") // short: a socket path is at most 107 bytes
	if err != nil {
		return nil, fmt.Errorf("broker socket: %w", err)
	}
	defer os.RemoveAll(private)
	tmp := filepath.Join(private, SocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("broker socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // it is moved; Close removes it where it is
	path := filepath.Join(dir, SocketName)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker socket: %w", err)
	}
	userNS, err := os.Readlink("/proc/self/ns/user")
	var st unix.Stat_t
	if err == nil {
		err = unix.Stat("/proc/self/ns/user", &st)
	}
	if err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("broker socket: %w", err)
	}
	s := &Server{ln: ln, path: path, answers: a, log: log, uid: os.Getuid(), userNS: userNS, userNSID: [2]uint64{st.Dev, st.Ino},
		conns: map[net.Conn]bool{}, servers: make(chan struct{}, maxConns)}
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
				s.log.Warn().Err(err).Msg("broker socket: accept failed; no longer served")
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

// serve answers one connection, within connTimeout.
func (s *Server) serve(conn *net.UnixConn) {
	conn.SetDeadline(time.Now().Add(connTimeout))
	answer := func(r reply) {
		if err := json.NewEncoder(conn).Encode(r); err != nil {
			s.log.Debug().Err(err).Msg("broker socket: reply not sent")
		}
	}
	// The request is read before any refusal, a peer's too: a connection
	// closed on a request not yet read makes the asker's write fail, and
	// the refusal never reach it. The peer is who connected, whatever it
	// writes.
	line, shown, readErr := readRequest(conn)
	cred, err := peerCred(conn)
	if err != nil || (int(cred.Uid) != s.uid && cred.Uid != 0) {
		uid := -1
		if cred != nil {
			uid = int(cred.Uid)
		}
		s.log.Warn().Err(err).Int("peer_uid", uid).Msg("broker socket: peer of another user refused")
		answer(reply{Error: "refused: the broker answers its own user alone"})
		return
	}
	if err := s.sameUserNS(cred.Pid, shown); err != nil {
		s.log.Warn().Err(err).Int32("peer_pid", cred.Pid).Msg("broker socket: peer in another user namespace (a sandbox) refused")
		answer(reply{Error: "refused: the broker answers no one in a sandbox"})
		return
	}
	var req request
	if readErr != nil || json.Unmarshal(line, &req) != nil {
		answer(reply{Error: "the request is not one JSON line"})
		return
	}
	select {
	case s.servers <- struct{}{}:
		defer func() { <-s.servers }()
	default:
		answer(reply{Error: "busy: too many requests at once; try again"})
		return
	}
	switch req.Ask {
	case "", askAudit:
		list, err := s.answers.Decisions(store.DecisionFilter{Since: req.Since, Thread: req.Thread})
		if err != nil {
			answer(reply{Error: err.Error()})
			return
		}
		if list == nil {
			list = []store.Decision{}
		}
		answer(reply{Decisions: list})
	case askRuns:
		if s.answers.Runs == nil {
			answer(reply{Error: "this broker keeps no schedule runs"})
			return
		}
		list, err := s.answers.Runs(store.RunFilter{Since: req.Since, Schedule: req.Schedule})
		if err != nil {
			answer(reply{Error: err.Error()})
			return
		}
		answer(reply{Decisions: []store.Decision{}, Runs: list})
	case askStatus:
		if s.answers.Status == nil {
			answer(reply{Error: "this broker does not tell its status"})
			return
		}
		b, err := json.Marshal(s.answers.Status())
		if err != nil {
			answer(reply{Error: err.Error()})
			return
		}
		answer(reply{Status: b})
	default:
		answer(reply{Error: fmt.Sprintf("unknown request %q", req.Ask)})
	}
}

// readRequest reads a request line of at most maxRequest bytes from
// conn, and the device and inode of the user namespace whose descriptor
// came with it (nil if none did). A descriptor received is closed;
// more than one, the kernel drops.
func readRequest(conn *net.UnixConn) (line []byte, shown *[2]uint64, err error) {
	buf := make([]byte, maxRequest)
	oob := make([]byte, unix.CmsgSpace(4)) // one descriptor
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				var st unix.Stat_t
				if shown == nil && unix.Fstat(fd, &st) == nil {
					shown = &[2]uint64{st.Dev, st.Ino}
				}
				unix.Close(fd)
			}
		}
	}
	if err != nil {
		return nil, shown, err
	}
	rest := io.MultiReader(bytes.NewReader(buf[:n]), conn)
	line, err = bufio.NewReader(io.LimitReader(rest, maxRequest)).ReadBytes('\n')
	return line, shown, err
}

// sameUserNS says why the peer pid, which sent a descriptor of the
// user namespace shown (nil: none), is not in the broker's user
// namespace, or nil if it is.
func (s *Server) sameUserNS(pid int32, shown *[2]uint64) error {
	if shown != nil {
		if *shown != s.userNSID {
			return errors.New("the user namespace it sent is not the broker's")
		}
		return nil
	}
	ns, err := peerUserNS(pid)
	if err != nil {
		return err
	}
	if ns != s.userNS {
		return fmt.Errorf("its user namespace is %s", ns)
	}
	return nil
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

// ErrNoSocket: no running broker answers on the state directory's
// socket.
var ErrNoSocket = errors.New("no broker answers on its socket")

// ask sends req to the broker running on dir and reads its reply,
// within ctx.
func ask(ctx context.Context, dir string, req request) (reply, error) {
	path := filepath.Join(dir, SocketName)
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return reply{}, fmt.Errorf("%w (%s): %w", ErrNoSocket, path, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	line, err := json.Marshal(req)
	if err != nil {
		return reply{}, err
	}
	// The request comes with a descriptor of this process's user
	// namespace: it shows the broker where the asker is, which the broker
	// could not read in /proc of a process that is not dumpable.
	var oob []byte
	if ns, err := os.Open("/proc/self/ns/user"); err == nil {
		defer ns.Close()
		oob = unix.UnixRights(int(ns.Fd()))
	}
	if _, _, err := conn.(*net.UnixConn).WriteMsgUnix(append(line, '\n'), oob, nil); err != nil {
		return reply{}, fmt.Errorf("broker socket %s: %w", path, err)
	}
	var r reply
	if err := json.NewDecoder(io.LimitReader(conn, maxReplySize)).Decode(&r); err != nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		return reply{}, fmt.Errorf("broker socket %s: %w", path, err)
	}
	if r.Error != "" {
		return reply{}, fmt.Errorf("the running broker: %s", r.Error)
	}
	return r, nil
}

// Ask asks the broker running on dir for the decisions f selects, within
// ctx.
func Ask(ctx context.Context, dir string, f store.DecisionFilter) ([]store.Decision, error) {
	r, err := ask(ctx, dir, request{Ask: askAudit, Since: f.Since, Thread: f.Thread})
	if err != nil {
		return nil, err
	}
	return r.Decisions, nil
}

// AskRuns asks the broker running on dir for the schedule runs f
// selects, within ctx.
func AskRuns(ctx context.Context, dir string, f store.RunFilter) ([]store.ScheduleRun, error) {
	r, err := ask(ctx, dir, request{Ask: askRuns, Since: f.Since, Schedule: f.Schedule})
	if err != nil {
		return nil, err
	}
	return r.Runs, nil
}

// AskStatus asks the broker running on dir for its status, within ctx,
// and decodes it into v.
func AskStatus(ctx context.Context, dir string, v any) error {
	r, err := ask(ctx, dir, request{Ask: askStatus})
	if err != nil {
		return err
	}
	if len(r.Status) == 0 {
		return errors.New("the running broker did not tell its status: it is older than this command; restart it")
	}
	return json.Unmarshal(r.Status, v)
}
