package fakediscord

import (
	"bytes"
	"compress/zlib"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Gateway opcodes.
const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opPresenceUpdate = 3
	opVoiceState     = 4
	opResume         = 6
	opReconnect      = 7
	opRequestMembers = 8
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatAck   = 11
)

// GatewayStats counts what happened on the gateway.
type GatewayStats struct {
	// Connections counts websocket connections accepted;
	// ResumeURLConnections those made to resume_gateway_url.
	Connections          int
	ResumeURLConnections int
	Identifies           int
	// Resumes counts accepted RESUMEs; ResumesRejected those answered
	// INVALID_SESSION.
	Resumes         int
	ResumesRejected int
	// Replayed counts the dispatches resent on RESUME.
	Replayed   int
	Heartbeats int
	// Dispatches counts the dispatches sent (or queued for a resume),
	// over all sessions; Undelivered the events the user helpers raised
	// while no session could receive them.
	Dispatches  int
	Undelivered int
	// OtherOps counts the other opcodes the client sent (presence
	// updates, guild member requests, voice state updates).
	OtherOps map[int]int
	// ClientCloseCodes lists the close codes the client closed with.
	ClientCloseCodes []int
	// Connected is set while a connection is identified or resumed.
	Connected bool
	// SessionID, Seq, Intents and Compress describe the newest session:
	// its id, last sequence number, the intents and the compress flag it
	// identified with.
	SessionID string
	Seq       int64
	Intents   int64
	Compress  bool
	// Query is the query of the newest connection's URL (discordgo sends
	// v=9&encoding=json).
	Query string
}

// Stats returns the gateway counters.
func (s *Server) Stats() GatewayStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.OtherOps = map[int]int{}
	for k, v := range s.stats.OtherOps {
		st.OtherOps[k] = v
	}
	st.ClientCloseCodes = slices.Clone(s.stats.ClientCloseCodes)
	for c := range s.conns {
		if c.sess != nil {
			st.Connected = true
		}
	}
	if n := len(s.sessions); n > 0 {
		last := s.sessions[n-1]
		st.SessionID, st.Seq, st.Intents, st.Compress = last.id, last.seq, last.intents, last.compress
	}
	return st
}

// Connected reports whether a gateway connection is identified or
// resumed.
func (s *Server) Connected() bool { return s.Stats().Connected }

type frameKind int

const (
	frameData  frameKind = iota
	frameClose           // send a close frame, then close
	frameAbort           // close the connection without a close frame
)

type outFrame struct {
	kind   frameKind
	binary bool
	data   []byte
	code   int
	reason string
}

// gwConn is one websocket connection. Its writer goroutine sends the
// queued frames in order; the handler goroutine reads. The fields after
// the queue are guarded by the Server's mu.
type gwConn struct {
	s         *Server
	ws        *websocket.Conn
	viaResume bool

	qmu   sync.Mutex
	queue []outFrame
	wake  chan struct{}
	done  chan struct{}

	sess   *gwSession
	closed bool // a close was queued; further input is ignored
}

// gwSession is a gateway session: what IDENTIFY created and RESUME
// continues. backlog keeps every dispatch for replay (the latest ones
// with Options.MaxBacklog).
type gwSession struct {
	id       string
	intents  int64
	compress bool
	seq      int64
	backlog  []sentDispatch
	conn     *gwConn
	invalid  bool
}

type sentDispatch struct {
	seq  int64
	data []byte
}

func (c *gwConn) push(f outFrame) {
	c.qmu.Lock()
	c.queue = append(c.queue, f)
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *gwConn) writeLoop() {
	defer c.s.wg.Done()
	defer close(c.done)
	defer c.ws.Close()
	for range c.wake {
		c.qmu.Lock()
		q := c.queue
		c.queue = nil
		c.qmu.Unlock()
		for _, f := range q {
			deadline := time.Now().Add(5 * time.Second)
			switch f.kind {
			case frameData:
				typ := websocket.TextMessage
				if f.binary {
					typ = websocket.BinaryMessage
				}
				c.ws.SetWriteDeadline(deadline)
				if err := c.ws.WriteMessage(typ, f.data); err != nil {
					return
				}
			case frameClose:
				c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(f.code, f.reason), deadline)
				return
			case frameAbort:
				return
			}
		}
	}
}

// sendOp queues a non-dispatch payload.
func (c *gwConn) sendOp(op int, d any) {
	c.push(outFrame{kind: frameData, data: mustJSON(map[string]any{"op": op, "d": d, "s": nil, "t": nil})})
}

// sendDispatch queues a dispatch frame, zlib-compressed if the session
// asked for compression.
func (c *gwConn) sendDispatch(sess *gwSession, data []byte) {
	if !sess.compress {
		c.push(outFrame{kind: frameData, data: data})
		return
	}
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	z.Write(data)
	z.Close()
	c.push(outFrame{kind: frameData, binary: true, data: b.Bytes()})
}

// closeWithLocked queues a close frame with a gateway close code.
func (c *gwConn) closeWithLocked(code int, reason string) {
	c.closed = true
	c.push(outFrame{kind: frameClose, code: code, reason: reason})
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 4096,
	CheckOrigin:     func(*http.Request) bool { return true },
}

func (s *Server) serveGateway(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed || s.gatewayDown {
		s.mu.Unlock()
		http.Error(w, "gateway unavailable", http.StatusServiceUnavailable)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(4096 << 10)
	c := &gwConn{
		s:         s,
		ws:        ws,
		viaResume: strings.HasPrefix(r.URL.Path, "/resume-ws"),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.stats.Connections++
	if c.viaResume {
		s.stats.ResumeURLConnections++
	}
	s.stats.Query = r.URL.RawQuery
	c.sendOp(opHello, map[string]any{
		"heartbeat_interval": s.opts.HeartbeatInterval.Milliseconds(),
		"_trace":             []string{"fakediscord-gateway"},
	})
	s.wg.Add(1)
	s.notifyLocked()
	s.mu.Unlock()

	go c.writeLoop()
	c.readLoop()

	c.push(outFrame{kind: frameAbort})
	<-c.done
	s.mu.Lock()
	delete(s.conns, c)
	if c.sess != nil && c.sess.conn == c {
		c.sess.conn = nil
	}
	c.sess = nil
	s.notifyLocked()
	s.mu.Unlock()
}

type gwPayload struct {
	Op *int            `json:"op"`
	D  json.RawMessage `json:"d"`
}

func (c *gwConn) readLoop() {
	s := c.s
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				s.mu.Lock()
				s.stats.ClientCloseCodes = append(s.stats.ClientCloseCodes, ce.Code)
				// Closing with 1000 or 1001 ends the session on Discord:
				// it can no longer be resumed. A close frame answering
				// one the server sent does not count.
				if c.sess != nil && !c.closed && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway) {
					c.sess.invalid = true
				}
				s.notifyLocked()
				s.mu.Unlock()
			}
			return
		}
		var p gwPayload
		s.mu.Lock()
		if c.closed {
			s.mu.Unlock()
			continue
		}
		if json.Unmarshal(data, &p) != nil || p.Op == nil {
			c.closeWithLocked(4002, "Error while decoding payload.")
		} else {
			s.handleOpLocked(c, *p.Op, p.D)
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
}

func (s *Server) tokenOK(tok string) bool {
	return s.opts.Token == "" || strings.TrimPrefix(tok, "Bot ") == s.opts.Token
}

func (s *Server) handleOpLocked(c *gwConn, op int, d json.RawMessage) {
	switch op {
	case opHeartbeat:
		s.stats.Heartbeats++
		if !s.noAcks {
			c.sendOp(opHeartbeatAck, nil)
		}
	case opIdentify:
		s.identifyLocked(c, d)
	case opResume:
		s.resumeLocked(c, d)
	case opPresenceUpdate, opVoiceState, opRequestMembers:
		if c.sess == nil {
			c.closeWithLocked(4003, "Not authenticated.")
			return
		}
		if s.stats.OtherOps == nil {
			s.stats.OtherOps = map[int]int{}
		}
		s.stats.OtherOps[op]++
	default:
		c.closeWithLocked(4001, "Unknown opcode.")
	}
}

type identifyData struct {
	Token    string  `json:"token"`
	Intents  *int64  `json:"intents"`
	Compress bool    `json:"compress"`
	Shard    *[2]int `json:"shard"`
}

const privilegedIntents = IntentGuildMembers | IntentGuildPresences | IntentMessageContent

func (s *Server) identifyLocked(c *gwConn, d json.RawMessage) {
	if c.sess != nil {
		c.closeWithLocked(4005, "Already authenticated.")
		return
	}
	var id identifyData
	if json.Unmarshal(d, &id) != nil {
		c.closeWithLocked(4002, "Error while decoding payload.")
		return
	}
	if !s.tokenOK(id.Token) {
		c.closeWithLocked(4004, "Authentication failed.")
		return
	}
	if id.Intents == nil || *id.Intents < 0 || *id.Intents >= 1<<26 {
		c.closeWithLocked(4013, "Invalid intent(s).")
		return
	}
	if s.opts.DenyPrivilegedIntents && *id.Intents&privilegedIntents != 0 {
		c.closeWithLocked(4014, "Disallowed intent(s).")
		return
	}
	sess := &gwSession{id: randomHex(16), intents: *id.Intents, compress: id.Compress, conn: c}
	s.sessions = append(s.sessions, sess)
	c.sess = sess
	s.stats.Identifies++

	guilds := []any{}
	for _, gid := range s.guildOrder {
		guilds = append(guilds, map[string]any{"id": gid, "unavailable": true})
	}
	ready := map[string]any{
		"v":                  9,
		"user":               s.wireBotSelf(),
		"guilds":             guilds,
		"session_id":         sess.id,
		"session_type":       "normal",
		"resume_gateway_url": "ws://" + s.addr + "/resume-ws",
		"private_channels":   []any{},
		"relationships":      []any{},
		"presences":          []any{},
		"application":        map[string]any{"id": s.appID, "flags": 0},
		"_trace":             []string{"fakediscord-gateway"},
	}
	if id.Shard != nil {
		ready["shard"] = id.Shard
	}
	s.sendToLocked(sess, "READY", ready)
	if s.opts.IgnoreIntents || sess.intents&IntentGuilds != 0 {
		for _, gid := range s.guildOrder {
			s.sendToLocked(sess, "GUILD_CREATE", s.wireGuildLocked(s.guilds[gid]))
		}
	}
}

type resumeData struct {
	Token     string `json:"token"`
	SessionID string `json:"session_id"`
	Seq       int64  `json:"seq"`
}

func (s *Server) resumeLocked(c *gwConn, d json.RawMessage) {
	if c.sess != nil {
		c.closeWithLocked(4005, "Already authenticated.")
		return
	}
	var rd resumeData
	if json.Unmarshal(d, &rd) != nil {
		c.closeWithLocked(4002, "Error while decoding payload.")
		return
	}
	if !s.tokenOK(rd.Token) {
		c.closeWithLocked(4004, "Authentication failed.")
		return
	}
	var sess *gwSession
	for _, x := range s.sessions {
		if x.id == rd.SessionID {
			sess = x
		}
	}
	reject := sess == nil || sess.invalid || rd.Seq > sess.seq ||
		len(sess.backlog) > 0 && rd.Seq < sess.backlog[0].seq-1 // what it missed is no longer kept
	if s.rejectResumes > 0 {
		s.rejectResumes--
		reject = true
		if sess != nil {
			sess.invalid = true
		}
	}
	if reject {
		s.stats.ResumesRejected++
		c.sendOp(opInvalidSession, false)
		return
	}
	if old := sess.conn; old != nil && old != c {
		old.sess = nil
		old.push(outFrame{kind: frameAbort})
	}
	sess.conn = c
	c.sess = sess
	s.stats.Resumes++
	for _, f := range sess.backlog {
		if f.seq > rd.Seq {
			c.sendDispatch(sess, f.data)
			s.stats.Replayed++
		}
	}
	s.sendToLocked(sess, "RESUMED", map[string]any{"_trace": []string{"fakediscord-gateway"}})
}

// sendToLocked numbers a dispatch for one session, keeps it for replay
// and queues it on the session's connection, if any.
func (s *Server) sendToLocked(sess *gwSession, event string, d any) {
	sess.seq++
	data := mustJSON(map[string]any{"op": opDispatch, "s": sess.seq, "t": event, "d": d})
	sess.backlog = append(sess.backlog, sentDispatch{seq: sess.seq, data: data})
	if n := s.opts.MaxBacklog; n > 0 && len(sess.backlog) > 2*n {
		sess.backlog = append(sess.backlog[:0:0], sess.backlog[len(sess.backlog)-n:]...)
	}
	s.stats.Dispatches++
	if sess.conn != nil {
		sess.conn.sendDispatch(sess, data)
	}
}

// dispatchLocked sends an event to every live session whose intents
// include intent (0: no intent needed). build renders the payload for a
// session, or returns nil to skip it. It reports whether any session
// got the event.
func (s *Server) dispatchLocked(event string, intent int64, build func(*gwSession) any) bool {
	sent := false
	for _, sess := range s.sessions {
		if sess.invalid {
			continue
		}
		if intent != 0 && !s.opts.IgnoreIntents && sess.intents&intent == 0 {
			continue
		}
		d := build(sess)
		if d == nil {
			continue
		}
		s.sendToLocked(sess, event, d)
		sent = true
	}
	return sent
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// DropGateway cuts every gateway connection without a close frame, as a
// network failure would. The sessions stay resumable; events raised
// meanwhile are replayed on RESUME.
func (s *Server) DropGateway() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.closed = true
		c.push(outFrame{kind: frameAbort})
	}
}

// CloseGateway closes every gateway connection with a close frame
// carrying code (e.g. 4000 "unknown error", resumable; 4009 "session
// timed out"). With invalidate the sessions can no longer be resumed.
func (s *Server) CloseGateway(code int, reason string, invalidate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if invalidate && c.sess != nil {
			c.sess.invalid = true
		}
		c.closeWithLocked(code, reason)
	}
}

// RejectNextResume makes the next RESUME fail with INVALID_SESSION (op 9,
// d false) and ends the session it named; the client must IDENTIFY anew.
func (s *Server) RejectNextResume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectResumes++
}

// RequestReconnect sends RECONNECT (op 7) on every identified
// connection: the client is to reconnect and resume.
func (s *Server) RequestReconnect() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.sess != nil && !c.closed {
			c.sendOp(opReconnect, nil)
		}
	}
}

// InvalidateSession sends INVALID_SESSION (op 9) with d = resumable on
// every identified connection; unless resumable, their sessions end.
func (s *Server) InvalidateSession(resumable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.sess == nil || c.closed {
			continue
		}
		if !resumable {
			c.sess.invalid = true
			c.sess.conn = nil
			c.sess = nil
		}
		c.sendOp(opInvalidSession, resumable)
	}
}

// RequestHeartbeat sends HEARTBEAT (op 1) on every connection; the
// client is to heartbeat at once.
func (s *Server) RequestHeartbeat() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if !c.closed {
			c.sendOp(opHeartbeat, nil)
		}
	}
}

// SetGatewayDown makes the gateway refuse new connections (HTTP 503), as
// during an outage, or take them again. Open connections are left as
// they are: DropGateway cuts them.
func (s *Server) SetGatewayDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gatewayDown = down
}

// SetHeartbeatAcks turns HEARTBEAT_ACK answers on (the default) or off,
// to make a connection look dead to the client.
func (s *Server) SetHeartbeatAcks(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noAcks = !on
}
