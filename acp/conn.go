package acp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/internal/redact"

	"github.com/rs/zerolog"
	"github.com/sourcegraph/jsonrpc2"
)

// Options configure a Conn. The zero value of every field has a usable
// default.
type Options struct {
	Logger zerolog.Logger
	// MaxLineBytes caps one incoming message line (default 32 MiB).
	MaxLineBytes int
	// UpdateQueue is the capacity of each subscription's update queue
	// (default 1024); UpdateQueueBytes bounds the JSON of the updates in
	// it (default 64 MiB). Past either, an update is dropped and the
	// subscription overflows.
	UpdateQueue      int
	UpdateQueueBytes int
	// ClientInfo is sent in initialize.
	ClientInfo Implementation
	// AuthMethod is the method id used when the agent says authentication
	// is required. Empty means "fail with ErrAuthRequired".
	AuthMethod string
	// MaxAgentRequests bounds the agent's requests being served at once
	// (permission, fs, terminal), and MaxAgentRequestBytes the bytes of
	// their params; past either a request is refused at once (default 64,
	// and 64 MiB).
	MaxAgentRequests     int
	MaxAgentRequestBytes int
	// Host serves the agent's file and terminal requests (nil: none are
	// served, and none are offered in initialize). The Conn closes it in
	// Close.
	Host Host
	// Redact masks secret values in the error messages the agent answers
	// with, before anyone logs or shows them (nil: none).
	Redact *redact.Redactor
	// FirstID, when not zero, is the id of the Conn's first request, and
	// the others follow it. A Conn that takes up an agent from an earlier
	// one (see Adopt) starts past that one's ids: the agent's answers to
	// its requests may still come, and must match none of this Conn's.
	FirstID uint64
}

// Defaults of the Options bounds.
const (
	DefaultMaxAgentRequests     = 64
	DefaultMaxAgentRequestBytes = 64 << 20
	DefaultUpdateQueueBytes     = 64 << 20
)

// Conn is the client side of one agent's stdio. It owns the goroutines it
// starts; Close stops them and returns when they are gone.
//
// All methods are safe for concurrent use. Nothing the agent sends can block
// the read loop: updates go to bounded per-session queues, and requests from
// the agent are served on goroutines the Conn owns.
type Conn struct {
	log zerolog.Logger
	// noisy logs what the agent's own messages provoke (junk, refusals),
	// at most agentWarnBurst lines a second: an agent cannot flood the
	// broker's log, and through it the journal's rate limit, with them.
	// The metrics count every one.
	noisy zerolog.Logger
	opts  Options
	rpc   *jsonrpc2.Conn
	out   io.WriteCloser
	in    io.ReadCloser
	stats stats

	outbox   chan []byte
	notices  atomic.Int32  // answers nobody waits on, waiting for room in outbox
	stop     chan struct{} // closed by Close
	readDone chan struct{} // closed when the agent's output ends
	// closing ends with Close (cause ErrClosed), ended with the agent's
	// output too: the requests served for the agent live within them.
	closing, ended context.Context
	endClosing     context.CancelCauseFunc
	endEnded       context.CancelCauseFunc
	writeErr       atomic.Pointer[error]

	mu       sync.Mutex
	closed   bool
	readErr  error
	seq      uint64
	pending  map[jsonrpc2.ID]*Call
	subs     map[string]*Subscription
	sessions map[string]*session
	// early holds the updates for sessions not yet known, while a
	// session/new or session/load is in flight (creating counts them):
	// agents may send a session's first updates before its id. At most
	// maxEarlySessions ids, maxEarlyUpdates updates each and
	// maxEarlyBytes in all (earlyBytes); the rest is dropped and counted.
	// It is emptied when no session is being created.
	early        map[string]*earlyQueue
	earlyBytes   int
	creating     int
	perms        map[uint64]*permission
	permSeq      uint64
	serving      int // agent requests being served
	servingBytes int // the bytes of their params
	init         *InitializeResult
	// waits are the agent's requests served by the Host, by the agent's
	// request id, for $/cancel_request.
	waits map[jsonrpc2.ID]context.CancelCauseFunc

	closeOnce sync.Once
	wg        sync.WaitGroup
}

const (
	defaultUpdateQueue = 1024
	outboxSize         = 64
	maxEarlySessions   = 8
	maxEarlyUpdates    = 64
	maxEarlyBytes      = 1 << 20
)

// NewConn starts a connection reading agent output from r and writing agent
// input to w. The Conn takes ownership of both and closes them in Close.
func NewConn(r io.ReadCloser, w io.WriteCloser, opts Options) *Conn {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.UpdateQueue <= 0 {
		opts.UpdateQueue = defaultUpdateQueue
	}
	if opts.UpdateQueueBytes <= 0 {
		opts.UpdateQueueBytes = DefaultUpdateQueueBytes
	}
	if opts.MaxAgentRequests <= 0 {
		opts.MaxAgentRequests = DefaultMaxAgentRequests
	}
	if opts.MaxAgentRequestBytes <= 0 {
		opts.MaxAgentRequestBytes = DefaultMaxAgentRequestBytes
	}
	if opts.Host == nil {
		opts.Host = noHost{}
	}
	if opts.ClientInfo.Name == "" {
		opts.ClientInfo = Implementation{Name: "acp-broker", Version: "dev"}
	}
	c := &Conn{
		log:      opts.Logger,
		noisy:    opts.Logger.Sample(&zerolog.BurstSampler{Burst: agentWarnBurst, Period: time.Second}),
		opts:     opts,
		out:      w,
		in:       r,
		outbox:   make(chan []byte, outboxSize),
		stop:     make(chan struct{}),
		readDone: make(chan struct{}),
		pending:  map[jsonrpc2.ID]*Call{},
		subs:     map[string]*Subscription{},
		sessions: map[string]*session{},
		early:    map[string]*earlyQueue{},
		perms:    map[uint64]*permission{},
		waits:    map[jsonrpc2.ID]context.CancelCauseFunc{},
	}
	if opts.FirstID > 0 {
		c.seq = opts.FirstID - 1
	}
	c.closing, c.endClosing = context.WithCancelCause(context.Background())
	c.ended, c.endEnded = context.WithCancelCause(c.closing)
	stream := &lineStream{
		r:       bufio.NewReaderSize(r, 4<<10),
		max:     opts.MaxLineBytes,
		conn:    c,
		closeFn: c.closeIO,
	}
	c.wg.Go(c.writeLoop)
	c.rpc = jsonrpc2.NewConn(context.Background(), stream, noRequests{}, jsonrpc2.SetLogger(logAdapter{c.log}))
	return c
}

func (c *Conn) closeIO() error {
	errIn := c.in.Close()
	errOut := c.out.Close()
	return errors.Join(errIn, errOut)
}

// Done is closed when the agent's output has ended (EOF, read error or
// Close). After Done, every pending and future call fails.
func (c *Conn) Done() <-chan struct{} { return c.readDone }

// Err returns why the agent's output ended, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readErr
}

// Close tears the connection down: pending calls fail with ErrClosed, open
// permission requests are cancelled, the requests the Host serves are
// ended, the Host is closed (which ends every terminal), and both pipes
// are closed. It returns when every goroutine the Conn started, and
// the Host's Close, have ended. Safe to call twice.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.stop)
		c.endClosing(ErrClosed)
		_ = c.rpc.Close()
		c.readEnded(ErrClosed)
		<-c.rpc.DisconnectNotify()
		c.mu.Lock()
		clear(c.early)
		c.earlyBytes = 0
		c.mu.Unlock()
		if err := c.opts.Host.Close(); err != nil {
			c.log.Warn().Err(err).Msg("the agent's host did not close cleanly")
		}
	})
	c.wg.Wait()
	<-c.readDone
	return nil
}

// readEnded records the end of the agent's output and fails everything that
// waits on it. Safe to call more than once; the first cause wins.
func (c *Conn) readEnded(cause error) {
	c.mu.Lock()
	if c.readErr != nil {
		c.mu.Unlock()
		return
	}
	if errors.Is(cause, io.EOF) {
		cause = ErrAgentGone
	} else if !errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w: %w", ErrAgentGone, cause)
	}
	c.readErr = cause
	calls := c.pending
	c.pending = map[jsonrpc2.ID]*Call{}
	perms := c.perms
	c.perms = map[uint64]*permission{}
	c.mu.Unlock()
	for _, call := range calls {
		call.finish(nil, cause)
	}
	for _, p := range perms {
		p.cancel(cause)
	}
	c.endEnded(ErrClosed)
	close(c.readDone)
}

// spawn runs f on a goroutine the Conn owns, unless the Conn is closing.
// The Add happens under mu before Close can start waiting.
func (c *Conn) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Go(f)
	return true
}

func (c *Conn) writeLoop() {
	for {
		select {
		case b := <-c.outbox:
			if c.writeErr.Load() != nil {
				continue
			}
			if _, err := c.out.Write(b); err != nil {
				c.writeErr.Store(&err)
				if errors.Is(err, os.ErrClosed) {
					// The broker closed the agent's input to stop it: what
					// was still queued has no one to go to.
					c.log.Debug().Err(err).Msg("write to an agent being stopped dropped")
				} else {
					c.log.Warn().Err(err).Msg("write to agent failed")
				}
			}
		case <-c.stop:
			return
		}
	}
}

// enqueue hands one whole message to the writer. It blocks only while the
// writer's queue is full, and returns early when ctx or the Conn ends.
func (c *Conn) enqueue(ctx context.Context, b []byte) error {
	if p := c.writeErr.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrAgentGone, *p)
	}
	line := make([]byte, len(b)+1)
	copy(line, b)
	line[len(b)] = '\n'
	select {
	case c.outbox <- line:
		return nil
	case <-c.stop:
		return ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// tryEnqueue hands one whole message to the writer if its queue has
// room now, and reports whether it did.
func (c *Conn) tryEnqueue(b []byte) bool {
	if c.writeErr.Load() != nil {
		return false
	}
	line := make([]byte, len(b)+1)
	copy(line, b)
	line[len(b)] = '\n'
	select {
	case c.outbox <- line:
		return true
	default:
		return false
	}
}

// agentWarnBurst is how many lines a second an agent's messages may add
// to the log through noisy.
const agentWarnBurst = 20

// maxWaitingNotices bounds the answers nobody waits on (to refused,
// unknown or invalid requests) that wait for room in the writer's queue,
// each for at most noticeWait. An agent that floods requests while
// reading nothing would otherwise hold a goroutine per request; past the
// bound such an answer is not sent, and counted.
const maxWaitingNotices = 256

// notice sends b, an answer nobody waits on: at once if the writer's
// queue has room, else from a goroutine that waits up to noticeWait, if
// fewer than maxWaitingNotices wait already. An answer not sent is
// counted in UnsentAnswers.
func (c *Conn) notice(b []byte, what string) {
	if c.tryEnqueue(b) {
		return
	}
	unsent := func(err error) {
		c.stats.unsentAnswers.Add(1)
		c.noisy.Debug().Err(err).Msg(what + " not sent")
	}
	if c.notices.Add(1) > maxWaitingNotices {
		c.notices.Add(-1)
		unsent(errors.New("the agent reads nothing and too many answers wait"))
		return
	}
	if !c.spawn(func() {
		defer c.notices.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), noticeWait)
		defer cancel()
		if err := c.enqueue(ctx, b); err != nil && !errors.Is(err, ErrClosed) {
			unsent(err)
		}
	}) {
		c.notices.Add(-1)
	}
}

func (c *Conn) junk(line []byte, why string) {
	c.stats.junkLines.Add(1)
	preview := line
	if len(preview) > 200 {
		preview = preview[:200]
	}
	c.noisy.Warn().Str("why", why).Bytes("line", preview).Int("len", len(line)).Msg("skipped agent output that is not a JSON-RPC message")
}

// noRequests is jsonrpc2's handler, which no request reaches: the stream
// reads every message and routes it itself (see lineStream.dispatch).
// jsonrpc2 writes the answers (Reply) and owns the read loop's goroutine.
//
// The routing is ours, not jsonrpc2's, for what the broker promises of
// an agent's messages: an answer goes only to the call waiting for its id,
// and one that is late (its call abandoned) or names an id never sent is
// dropped and counted, never taken for the next call's; a session/update
// reaches its session's bounded queue without a decode into interfaces;
// params reach their handler as the agent wrote them; and a message
// jsonrpc2 cannot read (nested too deep, a batch, an unusable id) is
// still answered.
type noRequests struct{}

func (noRequests) Handle(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) {}

// logAdapter sends jsonrpc2's own log lines to zerolog.
type logAdapter struct{ log zerolog.Logger }

func (l logAdapter) Printf(format string, v ...any) {
	l.log.Debug().Msgf(format, v...)
}
