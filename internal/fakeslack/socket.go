package fakeslack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// SocketStats counts what happened in Socket Mode.
type SocketStats struct {
	// Opens counts apps.connections.open answered with a URL;
	// Connections the WebSocket connections accepted; Rejected those
	// refused for an unknown or spent ticket.
	Opens       int
	Connections int
	Rejected    int
	// Open is how many connections are open now; Ready how many of them
	// get envelopes (they were greeted and not told to disconnect).
	Open  int
	Ready int
	// Disconnects counts the disconnect messages sent, by reason.
	Disconnects map[string]int
	// Acks counts the acknowledgements in time; LateAcks those past
	// their deadline; DuplicateAcks repeats; UnknownAcks those naming no
	// envelope.
	Acks          int
	LateAcks      int
	DuplicateAcks int
	UnknownAcks   int
	// Oversized counts the messages of 20 KiB or more the client sent,
	// which Slack drops unread.
	Oversized int
	// Pings and Pongs count the WebSocket pings sent and the pongs back.
	Pings int
	Pongs int
}

// SocketStats returns the Socket Mode counters.
func (s *Server) SocketStats() SocketStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sockStats
	st.Disconnects = map[string]int{}
	for k, v := range s.sockStats.Disconnects {
		st.Disconnects[k] = v
	}
	st.Open = len(s.conns)
	for _, c := range s.conns {
		if c.ready {
			st.Ready++
		}
	}
	return st
}

// ticketLifetime is how long a URL from apps.connections.open may be
// dialled.
const ticketLifetime = time.Minute

func (s *Server) connectionsOpen(c *call) reply {
	for t, at := range s.tickets {
		if c.now.Sub(at) > ticketLifetime {
			delete(s.tickets, t)
		}
	}
	ticket := randomHex(16)
	s.tickets[ticket] = c.now
	s.sockStats.Opens++
	return okReply("url", "ws://"+s.addr+"/link/?ticket="+ticket+"&app_id="+s.bot.AppID)
}

type frameKind int

const (
	frameText  frameKind = iota
	frameAbort           // close the connection without a close frame
)

type outFrame struct {
	kind frameKind
	data []byte
}

// smConn is one Socket Mode connection. Its writer goroutine sends the
// queued frames in order and the pings; the handler goroutine reads. The
// fields after the queue are guarded by the Server's mu.
type smConn struct {
	s  *Server
	id int
	ws *websocket.Conn

	qmu   sync.Mutex
	queue []outFrame
	wake  chan struct{}
	done  chan struct{}

	ready   bool      // greeted and not told to disconnect
	closeAt time.Time // told to disconnect: the fake closes it then
}

func (c *smConn) push(f outFrame) {
	c.qmu.Lock()
	c.queue = append(c.queue, f)
	c.qmu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *smConn) writeLoop() {
	s := c.s
	defer s.wg.Done()
	defer close(c.done)
	defer c.ws.Close()
	tick := time.NewTicker(s.opts.PingInterval)
	defer tick.Stop()
	for {
		select {
		case <-c.wake:
		case <-tick.C:
			s.mu.Lock()
			on := !s.noPings
			if on {
				s.sockStats.Pings++
			}
			s.mu.Unlock()
			if on {
				if c.ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(5*time.Second)) != nil {
					return
				}
			}
			continue
		case <-s.quit:
			return
		}
		c.qmu.Lock()
		q := c.queue
		c.queue = nil
		c.qmu.Unlock()
		for _, f := range q {
			if f.kind == frameAbort {
				return
			}
			c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if c.ws.WriteMessage(websocket.TextMessage, f.data) != nil {
				return
			}
		}
	}
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 32 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	now := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "closed", http.StatusServiceUnavailable)
		return
	}
	at, ok := s.tickets[ticket]
	delete(s.tickets, ticket)
	if !ok || now.Sub(at) > ticketLifetime {
		s.sockStats.Rejected++
		s.notifyLocked()
		s.mu.Unlock()
		http.Error(w, "invalid ticket", http.StatusUnauthorized)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()

	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	ws.SetReadLimit(1 << 20)
	c := &smConn{s: s, ws: ws, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.connSeq++
	c.id = s.connSeq
	s.sockStats.Connections++
	ready := 0
	for _, o := range s.conns {
		if o.ready {
			ready++
		}
	}
	s.conns = append(s.conns, c)
	if ready >= s.opts.MaxConnections {
		s.disconnectLocked(c, "too_many_websockets", now)
	} else {
		hello, _ := json.Marshal(map[string]any{
			"type":            "hello",
			"num_connections": ready + 1,
			"debug_info": map[string]any{
				"host":                        s.hostOf(c),
				"build_number":                1,
				"approximate_connection_time": 18060,
			},
			"connection_info": map[string]any{"app_id": s.bot.AppID},
		})
		c.push(outFrame{kind: frameText, data: hello})
		c.ready = true
		s.wakeScheduler()
	}
	ws.SetPongHandler(func(string) error {
		s.mu.Lock()
		s.sockStats.Pongs++
		s.mu.Unlock()
		return nil
	})
	s.wg.Add(1)
	s.notifyLocked()
	s.mu.Unlock()

	go c.writeLoop()
	c.readLoop()

	c.push(outFrame{kind: frameAbort})
	<-c.done
	s.mu.Lock()
	for i, o := range s.conns {
		if o == c {
			s.conns = append(s.conns[:i:i], s.conns[i+1:]...)
			break
		}
	}
	c.ready = false
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Server) hostOf(c *smConn) string { return fmt.Sprintf("applink-fake-%d", c.id) }

// maxAckSize is the size from which Slack drops what a Socket Mode
// client sends.
const maxAckSize = 20 << 10

// readLoop takes the acknowledgements of envelopes until the connection
// fails.
func (c *smConn) readLoop() {
	s := c.s
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		s.mu.Lock()
		if len(data) >= maxAckSize {
			s.sockStats.Oversized++
		} else if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			s.sockStats.UnknownAcks++
		} else {
			s.ackLocked(ack.EnvelopeID, ack.Payload, time.Now())
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// pickConnLocked chooses the connection for the next envelope, in turn
// among those ready; nil if none is.
func (s *Server) pickConnLocked() *smConn {
	n := len(s.conns)
	for i := range n {
		c := s.conns[(s.rr+i)%n]
		if c.ready {
			s.rr = (s.rr + i + 1) % n
			return c
		}
	}
	return nil
}

// disconnectLocked tells a connection to go away, and closes it after
// Options.DisconnectGrace if the client has not.
func (s *Server) disconnectLocked(c *smConn, reason string, now time.Time) {
	msg, _ := json.Marshal(map[string]any{
		"type":       "disconnect",
		"reason":     reason,
		"debug_info": map[string]any{"host": s.hostOf(c)},
	})
	c.push(outFrame{kind: frameText, data: msg})
	c.ready = false
	c.closeAt = now.Add(s.opts.DisconnectGrace)
	if s.sockStats.Disconnects == nil {
		s.sockStats.Disconnects = map[string]int{}
	}
	s.sockStats.Disconnects[reason]++
	s.wakeScheduler()
}

// Disconnect sends every ready connection a disconnect message with
// reason (refresh_requested, link_disabled, warning…), as Slack does
// before it closes a connection; the fake closes them after
// Options.DisconnectGrace. Envelopes awaiting their acknowledgement on
// them are retried (events) or given up (interactions) when their
// deadline passes.
func (s *Server) Disconnect(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, c := range s.conns {
		if c.ready {
			s.disconnectLocked(c, reason, now)
		}
	}
	s.notifyLocked()
}

// RefreshConnections is Disconnect("refresh_requested"): Slack's
// periodic refresh of a connection.
func (s *Server) RefreshConnections() { s.Disconnect("refresh_requested") }

// DisableLink is Disconnect("link_disabled"): Socket Mode turned off for
// the app.
func (s *Server) DisableLink() { s.Disconnect("link_disabled") }

// DropConnections cuts every Socket Mode connection without a close
// frame, as a network failure would.
func (s *Server) DropConnections() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.ready = false
		c.push(outFrame{kind: frameAbort})
	}
	s.notifyLocked()
}

// SetPings turns the WebSocket pings of Socket Mode connections on (the
// default) or off, to make a connection look dead to the client.
func (s *Server) SetPings(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noPings = !on
}

// Connected reports whether a Socket Mode connection is ready for
// envelopes.
func (s *Server) Connected() bool { return s.SocketStats().Ready > 0 }
