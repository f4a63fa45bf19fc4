package cluster

import (
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// An agent's stdin and stdout each travel as a stream: chunks numbered from
// 1, sent on one subject and acknowledged on another with two numbers, the
// highest chunk received in order and the highest one consumed. The
// sender keeps every chunk until it is consumed, so the bytes in flight
// (and held by the receiver) never exceed its window; it resends what was
// not received when no acknowledgement came for a while, which is what
// carries a stream across a NATS server restart. The receiver drops
// duplicates and chunks after a gap (the gap is resent, with them).

// Frame kinds, in the header hKind.
const (
	kindData  = "d"
	kindEOF   = "eof" // the writer closed: the stream has no more bytes
	kindEnd   = "end" // the process ended: its exit travels in the body
	kindProbe = "p"   // asks the receiver to acknowledge again
)

const (
	hSeq    = "Seq"
	hKind   = "Kind"
	hMethod = "Method"
)

// Defaults of the streams.
const (
	defaultChunk    = 64 << 10
	defaultWindow   = 4 << 20
	defaultResend   = 500 * time.Millisecond
	payloadHeadroom = 4 << 10 // kept free of a message's max payload for headers and JSON
	// maxFrames bounds the chunks in flight, however small: what a
	// receiver holds and a resend sends again.
	maxFrames = 1024
)

// relayStats are counted by every stream of a Client or a Server.
type relayStats struct {
	bytesSent, msgsSent  atomic.Int64
	bytesRecv, msgsRecv  atomic.Int64
	retransmits, dropped atomic.Int64
}

type frame struct {
	seq  uint64
	kind string
	data []byte
}

// sender is one stream's sending end.
type sender struct {
	nc     *nats.Conn
	subj   string
	window int
	chunk  int
	resend time.Duration
	stats  *relayStats

	mu       sync.Mutex
	next     uint64  // the number of the next chunk
	queue    []frame // not yet consumed, in order
	held     int     // bytes in queue
	recv     uint64  // the receiver has every chunk up to this one
	progress time.Time
	changed  chan struct{} // closed and replaced when held shrinks or err is set
	err      error         // set by fail: writes are refused
	closed   bool          // an EOF or End has been queued
}

func newSender(nc *nats.Conn, subj string, window, chunk int, resend time.Duration, st *relayStats) *sender {
	return &sender{nc: nc, subj: subj, window: window, chunk: chunk, resend: resend, stats: st,
		next: 1, changed: make(chan struct{}), progress: time.Now()}
}

var errStreamClosed = errors.New("stream closed")

// Write sends p in chunks, blocking while the window is full, until fail
// is called.
func (s *sender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), s.chunk)
		if err := s.queueFrame(kindData, p[:c]); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// queueFrame waits for room in the window, then numbers, keeps and sends
// a copy of data.
func (s *sender) queueFrame(kind string, data []byte) error {
	s.mu.Lock()
	for {
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if s.closed {
			s.mu.Unlock()
			return errStreamClosed
		}
		if s.held == 0 || (s.held+len(data) <= s.window && len(s.queue) < maxFrames) {
			break
		}
		ch := s.changed
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	f := frame{seq: s.next, kind: kind, data: append([]byte(nil), data...)}
	s.next++
	s.queue = append(s.queue, f)
	s.held += len(f.data)
	if kind == kindEOF || kind == kindEnd {
		s.closed = true
	}
	s.publish(f)
	s.mu.Unlock()
	return nil
}

// publish sends f; a failure is left to the resend. Called with mu held so
// that frames leave in order.
func (s *sender) publish(f frame) {
	m := nats.NewMsg(s.subj)
	m.Header.Set(hSeq, strconv.FormatUint(f.seq, 10))
	m.Header.Set(hKind, f.kind)
	m.Data = f.data
	if s.nc.PublishMsg(m) == nil {
		s.stats.msgsSent.Add(1)
		s.stats.bytesSent.Add(int64(len(f.data)))
	}
}

// ack takes the receiver's acknowledgement.
func (s *sender) ack(recv, done uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if recv > s.recv {
		s.recv = recv
		s.progress = time.Now()
	}
	freed := false
	for len(s.queue) > 0 && s.queue[0].seq <= done {
		s.held -= len(s.queue[0].data)
		s.queue[0] = frame{}
		s.queue = s.queue[1:]
		freed = true
		s.progress = time.Now()
	}
	if freed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// tick resends, when nothing was acknowledged for the resend interval,
// every chunk the receiver lacks, or a probe when it lacks none but some
// are not yet consumed (the acknowledgement of their use may be lost).
func (s *sender) tick(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || len(s.queue) == 0 || now.Sub(s.progress) < s.resend || !s.nc.IsConnected() {
		return
	}
	s.progress = now
	sent := false
	for _, f := range s.queue {
		if f.seq > s.recv {
			s.publish(f)
			s.stats.retransmits.Add(1)
			sent = true
		}
	}
	if !sent {
		m := nats.NewMsg(s.subj)
		m.Header.Set(hKind, kindProbe)
		_ = s.nc.PublishMsg(m)
	}
}

// sent is the number of the last chunk queued.
func (s *sender) sent() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next - 1
}

// drained reports whether every frame queued has been consumed.
func (s *sender) drained() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) == 0
}

// fail ends the stream: blocked and later writes return err, and nothing
// more is resent. Safe to call twice; the first error stays.
func (s *sender) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	s.queue, s.held = nil, 0
	close(s.changed)
	s.changed = make(chan struct{})
}

// onAck is the handler of the acknowledgement subject.
func (s *sender) onAck(m *nats.Msg) {
	recv, done, ok := parseAck(m.Data)
	if ok {
		s.ack(recv, done)
	}
}

func parseAck(b []byte) (recv, done uint64, ok bool) {
	for i, c := range b {
		if c == ' ' {
			r, err1 := strconv.ParseUint(string(b[:i]), 10, 64)
			d, err2 := strconv.ParseUint(string(b[i+1:]), 10, 64)
			return r, d, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}

// receiver is one stream's receiving end: an io.Reader of the bytes in
// order.
type receiver struct {
	nc      *nats.Conn
	ackSubj string
	limit   int // bytes held at most: a sender past its window is not believed
	stats   *relayStats
	onEnd   func(body []byte) // called once, without mu, when the End frame arrives in order

	mu      sync.Mutex
	next    uint64  // the number expected next
	done    uint64  // every chunk up to this one is consumed
	pending []frame // received in order, not yet consumed
	held    int     // bytes in pending
	off     int     // bytes of pending[0] consumed
	ready   chan struct{}
	written uint64        // chunks up to this one were passed on (wrote)
	used    chan struct{} // closed and replaced when written grows
	eof     bool
	discard bool  // Close was called: what arrives counts as consumed
	err     error // set by fail: reads return it once pending is empty
}

func newReceiver(nc *nats.Conn, ackSubj string, limit int, st *relayStats, onEnd func([]byte)) *receiver {
	return &receiver{nc: nc, ackSubj: ackSubj, limit: limit, stats: st, onEnd: onEnd, next: 1, ready: make(chan struct{}), used: make(chan struct{})}
}

// onMsg is the handler of the stream's subject.
func (r *receiver) onMsg(m *nats.Msg) {
	kind := m.Header.Get(hKind)
	r.mu.Lock()
	if kind == kindProbe {
		r.ackLocked()
		r.mu.Unlock()
		return
	}
	seq, err := strconv.ParseUint(m.Header.Get(hSeq), 10, 64)
	if err == nil && seq == r.next && r.discard {
		r.next++
		r.done = seq
		r.ackLocked()
		r.mu.Unlock()
		if kind == kindEnd && r.onEnd != nil {
			r.onEnd(m.Data)
		}
		return
	}
	if err != nil || seq != r.next || r.err != nil || (r.held > 0 && r.held+len(m.Data) > r.limit) || len(r.pending) >= maxFrames {
		if err == nil {
			r.stats.dropped.Add(1)
		}
		r.ackLocked()
		r.mu.Unlock()
		return
	}
	r.stats.msgsRecv.Add(1)
	r.stats.bytesRecv.Add(int64(len(m.Data)))
	r.next++
	r.pending = append(r.pending, frame{seq: seq, kind: kind, data: m.Data})
	r.held += len(m.Data)
	r.ackLocked()
	close(r.ready)
	r.ready = make(chan struct{})
	r.mu.Unlock()
	if kind == kindEnd && r.onEnd != nil {
		r.onEnd(m.Data)
	}
}

func (r *receiver) ackLocked() {
	b := strconv.AppendUint(nil, r.next-1, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.done, 10)
	_ = r.nc.Publish(r.ackSubj, b)
}

// Read returns the stream's bytes in order, io.EOF after an EOF or End
// frame, or the error fail set once nothing is left to read.
func (r *receiver) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.eof {
			return 0, io.EOF
		}
		if len(r.pending) > 0 {
			f := &r.pending[0]
			if f.kind != kindData {
				r.consumeLocked()
				r.eof = true
				return 0, io.EOF
			}
			n := copy(p, f.data[r.off:])
			r.off += n
			if r.off == len(f.data) {
				r.consumeLocked()
			}
			if n > 0 || len(p) == 0 {
				return n, nil
			}
			continue
		}
		if r.err != nil {
			return 0, r.err
		}
		ch := r.ready
		r.mu.Unlock()
		<-ch
		r.mu.Lock()
	}
}

func (r *receiver) consumeLocked() {
	r.done = r.pending[0].seq
	r.held -= len(r.pending[0].data)
	r.pending[0] = frame{}
	r.pending = r.pending[1:]
	r.off = 0
	r.ackLocked()
}

// wrote says that what Read returned so far has been passed on.
func (r *receiver) wrote() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done > r.written {
		r.written = r.done
		close(r.used)
		r.used = make(chan struct{})
	}
}

// waitUsed waits until every chunk up to seq has been passed on (wrote),
// the stream has failed, or stop is closed.
func (r *receiver) waitUsed(seq uint64, stop <-chan struct{}) {
	for {
		r.mu.Lock()
		if r.written >= seq || r.err != nil {
			r.mu.Unlock()
			return
		}
		ch := r.used
		r.mu.Unlock()
		select {
		case <-ch:
		case <-stop:
			return
		}
	}
}

// fail ends the stream: a blocked Read returns err once what was
// received is read. Safe to call twice; the first error stays.
func (r *receiver) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	r.err = err
	close(r.ready)
	r.ready = make(chan struct{})
}

// Close stops reading: what arrives is no longer kept.
func (r *receiver) Close() error {
	r.fail(errStreamClosed)
	r.mu.Lock()
	if len(r.pending) > 0 {
		r.done = r.pending[len(r.pending)-1].seq
	}
	r.pending, r.held = nil, 0
	r.eof = true
	r.discard = true
	r.ackLocked()
	r.mu.Unlock()
	return nil
}
