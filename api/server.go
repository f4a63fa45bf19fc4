package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/config"
	"acpbroker/listener"
	"acpbroker/metrics"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

// OpenAPI is the API's OpenAPI document, served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Store keeps the API's prompts (the state store is one).
type Store interface {
	PutPrompt(p store.Prompt, answer *string)
	Prompt(id string) (p store.Prompt, answer string, ok bool, err error)
	Prompts() ([]store.Prompt, error)
}

// Config configures a Server; SetConfig changes its live part.
type Config struct {
	Tokens       []config.APIToken
	RateLimit    int   // requests per token per minute
	MaxBodyBytes int64 // a request's body
	// MaxConnections bounds the connections the listener holds open (read
	// by Listen alone; 0: defaultMaxConnections); MaxStreams the event
	// streams one token has open at once (0: defaultMaxStreams).
	MaxConnections int
	MaxStreams     int
	// MaxTextBytes bounds one attachment, as the chat bounds a text file
	// attached to a message.
	MaxTextBytes int64
	// Fronts are where prompts run, by platform name; a prompt that names
	// none goes to Default's ("" when there are several).
	Fronts  map[string]Front
	Default string
	// Profile reports whether an agent profile exists.
	Profile func(name string) bool
	Store   Store
	Logger  zerolog.Logger
}

// Server serves the API on its own listener. Close stops it and returns
// once its goroutines are gone; prompts it started go on in the engine.
type Server struct {
	ln   *listener.Limited
	http *http.Server
	ctx  context.Context // ends at Close: event streams end with it
	stop context.CancelFunc
	log  zerolog.Logger
	wg   sync.WaitGroup

	mu      sync.Mutex
	cfg     Config
	tokens  []tokenEntry
	buckets map[string]*bucket // by token name
	live    map[string]*prompt // prompts in memory, by id
	done    []endedPrompt      // ended prompts in memory, oldest first
	// doneBytes is what the ended prompts in memory keep, in all.
	doneBytes int
	keys      *ordered[*keyEntry] // Idempotency-Keys, by token and key, oldest first
	threads   *ordered[string]    // headless threads' tokens, by thread, least recently used first
	answers   map[int]uint64      // requests answered, by status
	streams   map[string]int      // event streams open, by token name
	// failures are the failed authentications, by remote address.
	failures map[string]*bucket
}

// Headless threads are kept while their prompts are (state.retention,
// a week by default), at most maxThreads.
const (
	threadTTL  = 7 * 24 * time.Hour
	maxThreads = 10000
)

// useThreadLocked records a headless thread as used now, forgetting the
// oldest beyond the bounds. s.mu must be held.
func (s *Server) useThreadLocked(thread, token string, at time.Time) {
	s.threads.put(thread, token, at)
	s.threads.trim(time.Now().Add(-threadTTL), maxThreads)
}

// tokenEntry is a token with its digest, compared in constant time.
type tokenEntry struct {
	config.APIToken
	digest [32]byte
}

// Bounds of what the Server keeps in memory: ended prompts (their events
// for late streams; GET reads the store after), at most keepEnded of
// them, for keepEndedAt, in keepEndedBytes in all (each keeps its last
// endedEventBytes of events and its clipped answer); and
// Idempotency-Keys.
const (
	keepEnded       = 1000
	keepEndedAt     = 10 * time.Minute
	keepEndedBytes  = 64 << 20
	endedEventBytes = 256 << 10
	keyTTL          = 24 * time.Hour
	maxKeys         = 10000
	maxKeyLen       = 200
)

// How long a client may take: to send a request's headers (a new
// connection that sends none is closed then), to send the whole request,
// to read an answer (an event stream bounds each of its writes with
// streamWriteWait instead), and to send its next request on a kept
// connection. Variables so that tests may shorten them before Listen.
var (
	readHeaderWait  = 10 * time.Second
	readWait        = time.Minute
	writeWait       = time.Minute
	idleWait        = time.Minute
	streamWriteWait = 30 * time.Second
)

// Defaults of the bounds a Config leaves 0.
const (
	defaultMaxConnections = 512
	defaultMaxStreams     = 32
)

// Listen starts serving the API on addr.
func Listen(addr string, cfg Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api.listen: %w", err)
	}
	s := &Server{ln: listener.Limit(ln, cmpInt(cfg.MaxConnections, defaultMaxConnections)), log: cfg.Logger, buckets: map[string]*bucket{},
		live: map[string]*prompt{}, keys: newOrdered[*keyEntry](), threads: newOrdered[string](), answers: map[int]uint64{},
		streams: map[string]int{}, failures: map[string]*bucket{}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.SetConfig(cfg)
	s.recall()
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: readHeaderWait, ReadTimeout: readWait, WriteTimeout: writeWait,
		IdleTimeout: idleWait, ConnState: s.ln.ConnState(nil), BaseContext: func(net.Listener) context.Context { return s.ctx }}
	s.wg.Go(func() {
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("the API stopped serving")
		}
	})
	return s, nil
}

// Addr is the address the API is served on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// MaxConnections is the bound on the connections its listener holds.
func (s *Server) MaxConnections() int { return s.ln.Max() }

// Close stops serving: event streams end, requests in flight get until
// ctx ends.
func (s *Server) Close(ctx context.Context) {
	s.stop()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	s.wg.Wait()
}

// SetConfig changes the tokens, the rate limit and the bounds (a
// reload); the fronts change too.
func (s *Server) SetConfig(cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = cfg
	s.tokens = s.tokens[:0]
	names := map[string]bool{}
	for _, t := range cfg.Tokens {
		s.tokens = append(s.tokens, tokenEntry{APIToken: t, digest: sha256.Sum256([]byte(t.Token))})
		names[t.Name] = true
	}
	for name, b := range s.buckets {
		if !names[name] {
			delete(s.buckets, name)
		} else {
			b.setRate(cfg.RateLimit)
		}
	}
}

// Config is the configuration the Server serves with now.
func (s *Server) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// recall reads the prompts kept: the Idempotency-Keys of the last day,
// and the threads headless prompts opened.
func (s *Server) recall() {
	list, err := s.cfg.Store.Prompts()
	if err != nil {
		s.log.Warn().Err(err).Msg("the API's prompts could not be read")
	}
	// Oldest first, as the bounds drop them.
	slices.SortStableFunc(list, func(a, b store.Prompt) int { return a.Created.Compare(b.Created) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range list {
		if p.Key != "" && time.Since(p.Created) < keyTTL {
			s.keys.put(p.Token+"\x00"+p.Key, &keyEntry{id: p.ID, digest: p.Digest, at: p.Created, ready: closedChan}, p.Created)
		}
		if p.Platform == "" && time.Since(p.Created) < threadTTL {
			s.threads.put(p.Thread, p.Token, p.Created)
		}
	}
	s.keys.trim(time.Now().Add(-keyTTL), maxKeys)
	s.threads.trim(time.Now().Add(-threadTTL), maxThreads)
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// keyEntry is an Idempotency-Key: the prompt it started (ready is closed
// once that is settled: id "" if it started none).
type keyEntry struct {
	id     string
	digest string
	at     time.Time
	ready  chan struct{}
	resp   *StartResponse
}

// route is one of the API's operations, as the OpenAPI document lists
// them.
type route struct {
	method, path string
	auth         bool
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, tok *tokenEntry)
}

var routes = []route{
	{"GET", "/v1/openapi.json", false, func(s *Server, w http.ResponseWriter, r *http.Request, _ *tokenEntry) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(OpenAPI)
	}},
	{"POST", "/v1/prompts", true, (*Server).postPrompt},
	{"GET", "/v1/prompts/{id}", true, (*Server).getPrompt},
	{"GET", "/v1/prompts/{id}/events", true, (*Server).events},
	{"POST", "/v1/prompts/{id}/cancel", true, (*Server).cancelPrompt},
	{"POST", "/v1/prompts/{id}/permission", true, (*Server).answerPermission},
}

// Stats are the API's counters, for /metrics.
func (s *Server) Stats() metrics.APIStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ls := s.ln.Stats()
	st := metrics.APIStats{Requests: maps.Clone(s.answers), Connections: ls.Open, Evicted: ls.Evicted, Refused: ls.Refused}
	for _, n := range s.streams {
		st.Streams += n
	}
	for _, p := range s.live {
		p.mu.Lock()
		if !final(p.rec.State) {
			st.Prompts++
		}
		p.mu.Unlock()
	}
	return st
}

// counted is a ResponseWriter that tells the status it answered.
type counted struct {
	http.ResponseWriter
	status int
}

func (c *counted) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *counted) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap lets an http.ResponseController reach the connection.
func (c *counted) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *counted) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Handler is the API's handler: every answer is counted by its status.
func (s *Server) Handler() http.Handler {
	mux := s.mux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &counted{ResponseWriter: w}
		mux.ServeHTTP(c, r)
		s.mu.Lock()
		s.answers[cmpInt(c.status, http.StatusOK)]++
		s.mu.Unlock()
	})
}

func cmpInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func (s *Server) mux() *http.ServeMux {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			var tok *tokenEntry
			if rt.auth {
				if tok = s.authenticate(w, r); tok == nil {
					return
				}
			}
			rt.handle(s, w, r, tok)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.authenticate(w, r) == nil {
			return
		}
		fail(w, http.StatusNotFound, "", "no such operation: %s %s (see /v1/openapi.json)", r.Method, r.URL.Path)
	})
	return mux
}

// Error is every error's body.
type Error struct {
	Error string `json:"error"`
	// Field names the request's field at fault, when one is.
	Field string `json:"field,omitempty"`
}

func fail(w http.ResponseWriter, status int, field, format string, args ...any) {
	reply(w, status, Error{Error: fmt.Sprintf(format, args...), Field: field})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// Failed authentications are limited by remote address: authFailures a
// minute, in a burst of as many; past them the address is answered 429
// (whatever token it sends) until one is allowed again. At most
// maxFailingAddrs addresses are remembered.
const (
	authFailures    = 20
	maxFailingAddrs = 4096
)

// authenticate finds the request's token, compared in constant time
// with every token's (by their digests, so that neither the length nor
// a prefix tells), and spends one of its requests; it answers 401 or
// 429 itself and returns nil then. A token is never logged.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) *tokenEntry {
	addr := remoteHost(r)
	now := time.Now()
	s.mu.Lock()
	if b := s.failures[addr]; b != nil {
		if wait, ok := b.peek(now); !ok {
			s.mu.Unlock()
			w.Header().Set("Retry-After", fmt.Sprint(int(wait/time.Second)+1))
			fail(w, http.StatusTooManyRequests, "", "more than %d failed authentications from %s in a minute: try again in %s", authFailures, addr, wait.Round(time.Second)+time.Second)
			return nil
		}
	}
	s.mu.Unlock()
	given, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || given == "" {
		s.failed(addr, now)
		w.Header().Set("WWW-Authenticate", `Bearer realm="acp-broker"`)
		fail(w, http.StatusUnauthorized, "", "no bearer token: send Authorization: Bearer <token>")
		return nil
	}
	digest := sha256.Sum256([]byte(strings.TrimSpace(given)))
	s.mu.Lock()
	var found *tokenEntry
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(digest[:], s.tokens[i].digest[:]) == 1 {
			t := s.tokens[i]
			found = &t
		}
	}
	if found == nil {
		s.mu.Unlock()
		s.failed(addr, now)
		w.Header().Set("WWW-Authenticate", `Bearer realm="acp-broker", error="invalid_token"`)
		fail(w, http.StatusUnauthorized, "", "the bearer token is not one of the broker's")
		return nil
	}
	b := s.buckets[found.Name]
	if b == nil {
		b = newBucket(s.cfg.RateLimit)
		s.buckets[found.Name] = b
	}
	wait, allowed := b.take(time.Now())
	s.mu.Unlock()
	if !allowed {
		w.Header().Set("Retry-After", fmt.Sprint(int(wait/time.Second)+1))
		fail(w, http.StatusTooManyRequests, "", "token %s made more than %d requests in a minute: try again in %s", found.Name, b.rate, wait.Round(time.Second)+time.Second)
		return nil
	}
	return found
}

// failed spends one of addr's failed authentications, forgetting the
// addresses whose allowance is whole again when there are too many.
func (s *Server) failed(addr string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.failures[addr]
	if b == nil {
		if len(s.failures) >= maxFailingAddrs {
			for a, old := range s.failures {
				if now.Sub(old.at) >= time.Minute {
					delete(s.failures, a)
				}
			}
			for a := range s.failures {
				if len(s.failures) < maxFailingAddrs {
					break
				}
				delete(s.failures, a)
			}
		}
		b = newBucket(authFailures)
		s.failures[addr] = b
	}
	b.take(now)
}

// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// bucket is a token's rate limit: rate requests a minute, in a burst of
// as many.
type bucket struct {
	rate   int
	tokens float64
	at     time.Time
}

func newBucket(rate int) *bucket { return &bucket{rate: rate, tokens: float64(rate)} }

func (b *bucket) setRate(rate int) {
	b.rate = rate
	b.tokens = min(b.tokens, float64(rate))
}

// take spends one request; if none is left, how long until one is.
func (b *bucket) take(now time.Time) (time.Duration, bool) {
	wait, ok := b.peek(now)
	if ok {
		b.tokens--
	}
	return wait, ok
}

// peek reports whether a request is left, spending none; if none is,
// how long until one is.
func (b *bucket) peek(now time.Time) (time.Duration, bool) {
	per := time.Minute / time.Duration(max(b.rate, 1))
	if !b.at.IsZero() {
		b.tokens = min(float64(b.rate), b.tokens+float64(now.Sub(b.at))/float64(per))
	}
	b.at = now
	if b.tokens >= 1 {
		return 0, true
	}
	return time.Duration((1 - b.tokens) * float64(per)), false
}

// Attachment is a text file given with a prompt, inlined as a chat
// inlines one attached to a message.
type Attachment struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// StartRequest is POST /v1/prompts's body.
type StartRequest struct {
	Platform    string       `json:"platform,omitempty"`
	Channel     string       `json:"channel,omitempty"`
	Thread      string       `json:"thread,omitempty"`
	Agent       string       `json:"agent,omitempty"`
	Text        string       `json:"text"`
	Attachments []Attachment `json:"attachments,omitempty"`
}

// StartResponse is POST /v1/prompts's answer.
type StartResponse struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Platform string `json:"platform,omitempty"`
	Channel  string `json:"channel,omitempty"`
	Thread   string `json:"thread"`
	Link     string `json:"link,omitempty"`
	Events   string `json:"events"`
}

// PromptView is GET /v1/prompts/{id}'s answer.
type PromptView struct {
	ID         string     `json:"id"`
	State      string     `json:"state"`
	Platform   string     `json:"platform,omitempty"`
	Thread     string     `json:"thread"`
	Link       string     `json:"link,omitempty"`
	Created    time.Time  `json:"created"`
	Started    *time.Time `json:"started,omitempty"`
	Ended      *time.Time `json:"ended,omitempty"`
	StopReason string     `json:"stop_reason,omitempty"`
	Error      string     `json:"error,omitempty"`
	Summary    string     `json:"summary,omitempty"`
	Answer     string     `json:"answer"`
	// AnswerBytes is the whole answer's length; Answer keeps its first
	// and last 128 KiB of a longer one.
	AnswerBytes int64           `json:"answer_bytes"`
	Usage       json.RawMessage `json:"usage,omitempty"`
	// Permissions are the open permission requests.
	Permissions []PermissionAsked `json:"permissions"`
}

func viewOf(rec store.Prompt, answer string) PromptView {
	v := PromptView{ID: rec.ID, State: rec.State, Platform: rec.Platform, Thread: rec.Thread, Link: rec.Link, Created: rec.Created,
		StopReason: rec.StopReason, Error: rec.Error, Summary: rec.Summary, Answer: answer, AnswerBytes: rec.AnswerBytes, Usage: rec.Usage,
		Permissions: []PermissionAsked{}}
	if !rec.Started.IsZero() {
		v.Started = &rec.Started
	}
	if !rec.Ended.IsZero() {
		v.Ended = &rec.Ended
	}
	return v
}

// badRequest is a request's fault, with the field it is in.
type badRequest struct {
	status int
	field  string
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func bad(status int, field, format string, args ...any) *badRequest {
	return &badRequest{status: status, field: field, msg: fmt.Sprintf(format, args...)}
}

// maxAttachments bounds a prompt's attachments, as a chat message's.
const maxAttachments = 10

// decodeStart reads and checks a POST /v1/prompts body against the
// token and the configuration; nothing is started.
func decodeStart(body []byte, maxText int64) (StartRequest, *badRequest) {
	var req StartRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return req, bad(http.StatusBadRequest, typeErr.Field, "%s must be a %s", typeErr.Field, typeErr.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return req, bad(http.StatusBadRequest, field, "unknown field %q: the fields are platform, channel, thread, agent, text, attachments", field)
		}
		return req, bad(http.StatusBadRequest, "", "the body is not a JSON object: %v", err)
	}
	if dec.More() {
		return req, bad(http.StatusBadRequest, "", "the body holds more than one JSON object")
	}
	switch {
	case strings.TrimSpace(req.Text) == "" && len(req.Attachments) == 0:
		return req, bad(http.StatusBadRequest, "text", "text is required: what the agent is asked")
	case req.Channel != "" && req.Thread != "":
		return req, bad(http.StatusBadRequest, "thread", "give channel or thread, not both")
	case req.Thread != "" && req.Agent != "":
		return req, bad(http.StatusBadRequest, "agent", "a thread keeps the agent it began with: name an agent only for a new thread")
	case len(req.Attachments) > maxAttachments:
		return req, bad(http.StatusRequestEntityTooLarge, "attachments", "%d attachments, more than %d", len(req.Attachments), maxAttachments)
	}
	for i, a := range req.Attachments {
		field := fmt.Sprintf("attachments[%d]", i)
		switch {
		case strings.TrimSpace(a.Name) == "" || strings.ContainsAny(a.Name, "/\x00\n"):
			return req, bad(http.StatusBadRequest, field+".name", "%s.name must be a file name", field)
		case int64(len(a.Content)) > maxText:
			return req, bad(http.StatusRequestEntityTooLarge, field+".content", "%s (%s) is %d bytes, more than the %d a text file may have", field, a.Name, len(a.Content), maxText)
		}
	}
	return req, nil
}

// blocks is what the agent is given: the text, then each attachment as
// an embedded text resource, as a chat gives a text file.
func (req StartRequest) blocks() []acp.ContentBlock {
	var out []acp.ContentBlock
	if strings.TrimSpace(req.Text) != "" {
		out = append(out, acp.TextBlock(req.Text))
	}
	for _, a := range req.Attachments {
		out = append(out, acp.TextBlock(fmt.Sprintf("Attached file %s:\n```\n%s\n```", a.Name, strings.TrimRight(a.Content, "\n"))))
	}
	return out
}

func (s *Server) postPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	r.Body = http.MaxBytesReader(w, r.Body, cfg.MaxBodyBytes)
	body, err := readAll(r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "", "the body is more than api.max_body_bytes (%d bytes)", cfg.MaxBodyBytes)
			return
		}
		fail(w, http.StatusBadRequest, "", "the body could not be read: %v", err)
		return
	}
	req, berr := decodeStart(body, cfg.MaxTextBytes)
	if berr != nil {
		fail(w, berr.status, berr.field, "%s", berr.msg)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxKeyLen {
		fail(w, http.StatusBadRequest, "Idempotency-Key", "the Idempotency-Key is longer than %d characters", maxKeyLen)
		return
	}
	digest := sha256.Sum256(body)
	sum := hex.EncodeToString(digest[:])
	var entry *keyEntry
	if key != "" {
		var prior *keyEntry
		prior, entry = s.claimKey(tok.Name, key, sum)
		if prior != nil {
			s.replay(w, r, prior, sum)
			return
		}
	}
	resp, berr := s.start(r.Context(), tok, req, key, sum)
	if entry != nil {
		s.settleKey(tok.Name, key, entry, resp)
	}
	if berr != nil {
		fail(w, berr.status, berr.field, "%s", berr.msg)
		return
	}
	w.Header().Set("Location", "/v1/prompts/"+resp.ID)
	reply(w, http.StatusAccepted, resp)
}

// claimKey finds the token's Idempotency-Key: prior when it is known
// (perhaps still being settled), else a new entry, claimed.
func (s *Server) claimKey(token, key, digest string) (prior, claimed *keyEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := token + "\x00" + key
	if e, _, ok := s.keys.get(k); ok && time.Since(e.at) < keyTTL {
		return e, nil
	}
	s.keys.delete(k)
	s.keys.trim(time.Now().Add(-keyTTL), maxKeys-1)
	e := &keyEntry{digest: digest, at: time.Now(), ready: make(chan struct{})}
	s.keys.put(k, e, e.at)
	return nil, e
}

// settleKey records what a claimed key started; one that started
// nothing is forgotten, so that a retry tries again.
func (s *Server) settleKey(token, key string, e *keyEntry, resp *StartResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if resp != nil {
		e.id, e.resp = resp.ID, resp
	} else if cur, _, ok := s.keys.get(token + "\x00" + key); ok && cur == e {
		s.keys.delete(token + "\x00" + key)
	}
	close(e.ready)
}

// replay answers a retried POST with what its key started.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, e *keyEntry, digest string) {
	select {
	case <-e.ready:
	case <-r.Context().Done():
		fail(w, http.StatusConflict, "Idempotency-Key", "a request with this Idempotency-Key is still being started")
		return
	}
	if e.digest != digest {
		fail(w, http.StatusUnprocessableEntity, "Idempotency-Key", "this Idempotency-Key was used with another request")
		return
	}
	if e.id == "" {
		fail(w, http.StatusConflict, "Idempotency-Key", "the request first sent with this Idempotency-Key started nothing: send it again")
		return
	}
	resp := e.resp
	if resp == nil {
		rec, _, ok, _ := s.cfg.Store.Prompt(e.id)
		if !ok {
			fail(w, http.StatusConflict, "Idempotency-Key", "the prompt this Idempotency-Key started is no longer kept")
			return
		}
		resp = &StartResponse{ID: rec.ID, Platform: rec.Platform, Thread: rec.Thread, Link: rec.Link, Events: "/v1/prompts/" + rec.ID + "/events"}
	}
	out := *resp
	if v, ok := s.lookup(out.ID); ok {
		out.State = v.State
	}
	w.Header().Set("Location", "/v1/prompts/"+out.ID)
	w.Header().Set("Idempotent-Replayed", "true")
	reply(w, http.StatusAccepted, out)
}

// start checks what the token may do and starts the prompt; nothing is
// started when it refuses.
func (s *Server) start(ctx context.Context, tok *tokenEntry, req StartRequest, key, digest string) (*StartResponse, *badRequest) {
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	platform := req.Platform
	if platform == "" {
		platform = cfg.Default
	}
	front := cfg.Fronts[platform]
	headless := platform == HeadlessPlatform
	switch {
	case req.Platform == "" && cfg.Default == "":
		return nil, bad(http.StatusBadRequest, "platform", "platform is required: the broker serves %s", strings.Join(sortedFronts(cfg.Fronts), ", "))
	case front == nil:
		return nil, bad(http.StatusBadRequest, "platform", "platform %q is not served: one of %s", req.Platform, strings.Join(sortedFronts(cfg.Fronts), ", "))
	case req.Agent != "" && !cfg.Profile(req.Agent):
		return nil, bad(http.StatusBadRequest, "agent", "there is no agent profile %q", req.Agent)
	case req.Agent != "" && !tok.MayName(req.Agent):
		return nil, bad(http.StatusForbidden, "agent", "token %s may not name the agent %q", tok.Name, req.Agent)
	}
	if !headless && req.Channel == "" && req.Thread == "" {
		return nil, bad(http.StatusBadRequest, "channel", "channel (a new thread there) or thread (one of the bot's) is required")
	}
	channel := req.Channel
	if req.Thread != "" {
		if headless {
			s.mu.Lock()
			owner, _, ok := s.threads.get(req.Thread)
			s.mu.Unlock()
			if !ok || owner != tok.Name {
				return nil, bad(http.StatusNotFound, "thread", "no thread %s of token %s's", req.Thread, tok.Name)
			}
		} else {
			ch, err := front.Channel(ctx, req.Thread)
			if err != nil {
				return nil, bad(http.StatusNotFound, "thread", "thread %s is not one of the bot's on %s", req.Thread, platform)
			}
			channel = ch
		}
	}
	if !headless && !tok.MayUse(platform, channel) {
		field := "channel"
		if req.Thread != "" {
			field = "thread"
		}
		return nil, bad(http.StatusForbidden, field, "token %s may not use channel %s on %s", tok.Name, channel, platform)
	}
	now := time.Now().UTC()
	rec := store.Prompt{ID: "p-" + randomHex(10), Token: tok.Name, Key: key, Digest: digest, Created: now, State: StateQueued}
	if !headless {
		rec.Platform = platform
	}
	p := newPrompt(s, front, tok.Name, rec)
	placed, err := front.Start(ctx, Job{Channel: req.Channel, Thread: req.Thread, Agent: req.Agent, Client: tok.Name,
		Text: req.Text, Blocks: req.blocks(), Sink: func(inner adapter.Sink) adapter.Sink {
			p.mu.Lock()
			s.mu.Lock()
			s.live[p.rec.ID] = p
			s.mu.Unlock()
			p.mu.Unlock()
			return p.sink(inner)
		}})
	if err != nil {
		s.mu.Lock()
		delete(s.live, rec.ID)
		s.mu.Unlock()
		return nil, startError(err, platform)
	}
	p.mu.Lock()
	p.rec.Thread, p.rec.Link = placed.Thread, placed.Link
	rec = p.rec
	p.mu.Unlock()
	s.mu.Lock()
	if headless {
		s.useThreadLocked(placed.Thread, tok.Name, now)
	}
	s.mu.Unlock()
	s.cfg.Store.PutPrompt(rec, nil)
	s.log.Info().Str("prompt", rec.ID).Str("token", tok.Name).Str("platform", platform).Str("thread", placed.Thread).Msg("API prompt started")
	view := p.view()
	return &StartResponse{ID: rec.ID, State: view.State, Platform: rec.Platform, Channel: placed.Channel, Thread: placed.Thread,
		Link: placed.Link, Events: "/v1/prompts/" + rec.ID + "/events"}, nil
}

// startError is a Front's refusal as the API answers it.
func startError(err error, platform string) *badRequest {
	switch {
	case errors.Is(err, ErrNotServed):
		return bad(http.StatusForbidden, "channel", "%v on %s", err, platform)
	case errors.Is(err, ErrNoThread):
		return bad(http.StatusNotFound, "thread", "%v on %s", err, platform)
	case errors.Is(err, adapter.ErrQueueFull):
		return bad(http.StatusTooManyRequests, "thread", "%v", err)
	case errors.Is(err, ErrOffline), errors.Is(err, adapter.ErrShutdown):
		return bad(http.StatusServiceUnavailable, "", "%v: try again later", err)
	}
	return bad(http.StatusBadGateway, "", "the prompt could not be started: %v", err)
}

func sortedFronts(m map[string]Front) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// endedPrompt is an ended prompt kept in memory: when it ended and the
// bytes it keeps.
type endedPrompt struct {
	id    string
	at    time.Time
	bytes int
}

// ended moves a prompt, which keeps bytes now, to the ended ones kept in
// memory, dropping the oldest beyond what is kept.
func (s *Server) ended(id string, at time.Time, bytes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = append(s.done, endedPrompt{id: id, at: at, bytes: bytes})
	s.doneBytes += bytes
	s.sweepEndedLocked()
}

func (s *Server) sweepEndedLocked() {
	for len(s.done) > 0 {
		e := s.done[0]
		if len(s.done) <= keepEnded && s.doneBytes <= keepEndedBytes && time.Since(e.at) < keepEndedAt {
			return
		}
		delete(s.live, e.id)
		s.doneBytes -= e.bytes
		s.done[0] = endedPrompt{}
		s.done = s.done[1:]
	}
}

// lookup is a prompt as GET shows it, from memory or the store.
func (s *Server) lookup(id string) (PromptView, bool) {
	s.mu.Lock()
	s.sweepEndedLocked()
	p := s.live[id]
	s.mu.Unlock()
	if p != nil {
		return p.view(), true
	}
	rec, answer, ok, err := s.cfg.Store.Prompt(id)
	if !ok || err != nil {
		return PromptView{}, false
	}
	if !final(rec.State) {
		// Recorded running by a broker that stopped.
		rec.State, rec.Error = StateFailed, "the broker stopped while the prompt ran"
	}
	return viewOf(rec, answer), true
}

// owned finds the token's prompt id, in memory (p) or only recorded;
// it answers 404 itself when there is none.
func (s *Server) owned(w http.ResponseWriter, r *http.Request, tok *tokenEntry) (*prompt, *store.Prompt, bool) {
	id := r.PathValue("id")
	s.mu.Lock()
	p := s.live[id]
	s.mu.Unlock()
	if p != nil {
		p.mu.Lock()
		owner := p.client
		p.mu.Unlock()
		if owner == tok.Name {
			return p, nil, true
		}
	} else if rec, _, ok, err := s.cfg.Store.Prompt(id); ok && err == nil && rec.Token == tok.Name {
		return nil, &rec, true
	}
	fail(w, http.StatusNotFound, "id", "no prompt %s of token %s's", id, tok.Name)
	return nil, nil, false
}

func (s *Server) getPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	if _, _, ok := s.owned(w, r, tok); !ok {
		return
	}
	v, _ := s.lookup(r.PathValue("id"))
	reply(w, http.StatusOK, v)
}

// CancelResponse is POST /v1/prompts/{id}/cancel's answer.
type CancelResponse struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (s *Server) cancelPrompt(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	if p == nil {
		fail(w, http.StatusConflict, "", "prompt %s has ended: %s", rec.ID, cmpOr(rec.State, "failed"))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if final(p.rec.State) {
		fail(w, http.StatusConflict, "", "prompt %s has ended: %s", p.rec.ID, p.rec.State)
		return
	}
	if !p.cancel {
		p.cancel, p.cancelCause = true, adapter.CancelledBy(tok.Name+" (through the API)")
		if p.started {
			p.front.Cancel(p.rec.Thread, p.cancelCause)
		}
		s.log.Info().Str("prompt", p.rec.ID).Str("token", tok.Name).Bool("running", p.started).Msg("API prompt cancelled")
	}
	reply(w, http.StatusAccepted, CancelResponse{ID: p.rec.ID, State: stateCancelling})
}

// PermissionRequest is POST /v1/prompts/{id}/permission's body.
type PermissionRequest struct {
	Request string `json:"request"`
	Option  string `json:"option"`
}

func (s *Server) answerPermission(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	if !tok.MayApprove {
		fail(w, http.StatusForbidden, "", "token %s may not answer permission requests (may_approve)", tok.Name)
		return
	}
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	var req PermissionRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(w, http.StatusRequestEntityTooLarge, "", "the body is more than 64 KiB")
			return
		}
		fail(w, http.StatusBadRequest, "", "the body is not {\"request\": …, \"option\": …}: %v", err)
		return
	}
	switch {
	case req.Request == "":
		fail(w, http.StatusBadRequest, "request", "request is required: the id a permission_asked event gave")
		return
	case req.Option == "":
		fail(w, http.StatusBadRequest, "option", "option is required: one of the request's options' ids")
		return
	case p == nil:
		fail(w, http.StatusConflict, "request", "prompt %s has ended: %s", rec.ID, rec.State)
		return
	}
	p.mu.Lock()
	pr := p.perms[req.Request]
	switch {
	case pr == nil:
		p.mu.Unlock()
		fail(w, http.StatusNotFound, "request", "prompt %s has no permission request %s", p.rec.ID, req.Request)
		return
	case !pr.open:
		msg := answeredText(pr)
		p.mu.Unlock()
		fail(w, http.StatusConflict, "request", "%s", msg)
		return
	case !slices.ContainsFunc(pr.req.Options, func(o acp.PermissionOption) bool { return o.OptionID == req.Option }):
		p.mu.Unlock()
		fail(w, http.StatusBadRequest, "option", "%q is not one of the request's options: %s", req.Option, optionIDs(pr.req))
		return
	}
	pr.mine = true
	p.mu.Unlock()
	if err := p.front.Answer(pr.req, req.Option, tok.Name); err != nil {
		// Someone in the chat was first (or the request closed): the
		// turn's Ask returns with that, which the request then says.
		p.mu.Lock()
		pr.mine = false
		p.mu.Unlock()
		fail(w, http.StatusConflict, "request", "%s", p.awaitClosed(r.Context(), pr))
		return
	}
	s.log.Info().Str("prompt", p.rec.ID).Str("token", tok.Name).Str("request", req.Request).Str("option", req.Option).Msg("API answered a permission request")
	reply(w, http.StatusOK, PermissionAnswered{Request: req.Request, Option: req.Option, By: tok.Name, Via: "api"})
}

// awaitClosed waits, within ctx and a second, for a request another
// answer claimed to say how it was answered, and says it.
func (p *prompt) awaitClosed(ctx context.Context, pr *perm) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr.open && ctx.Err() == nil {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
	return answeredText(pr)
}

// answeredText says how a request that is no longer open was closed.
func answeredText(pr *perm) string {
	switch {
	case pr.open:
		return "the permission request is being answered elsewhere; try again"
	case pr.via == "chat" && pr.outcome != "":
		return fmt.Sprintf("the permission request was answered first in the chat, by %s: %s", pr.by, pr.outcome)
	case pr.via == "chat":
		return fmt.Sprintf("the permission request was answered first in the chat, by %s", pr.by)
	case pr.via == "api":
		return fmt.Sprintf("the permission request was answered already through the API, by %s: %s", pr.by, pr.outcome)
	}
	return fmt.Sprintf("the permission request is closed (%s); the agent was told cancelled", pr.via)
}

func optionIDs(req *acp.PermissionRequest) string {
	var ids []string
	for _, o := range req.Options {
		ids = append(ids, o.OptionID)
	}
	return strings.Join(ids, ", ")
}

// keepAlive spaces the comments that keep an idle event stream open
// through proxies.
const keepAlive = 15 * time.Second

// events streams a prompt's events as Server-Sent Events, from after
// Last-Event-ID when given, until the end event (or the client leaves,
// or the API stops). A prompt no longer in memory gets its end alone.
func (s *Server) events(w http.ResponseWriter, r *http.Request, tok *tokenEntry) {
	p, rec, ok := s.owned(w, r, tok)
	if !ok {
		return
	}
	var last uint64
	if id := cmpOr(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("last_event_id")); id != "" {
		if _, err := fmt.Sscan(id, &last); err != nil {
			fail(w, http.StatusBadRequest, "Last-Event-ID", "Last-Event-ID %q is not an event id", id)
			return
		}
	}
	if !s.openStream(w, tok) {
		return
	}
	defer s.closeStream(tok)
	// The stream reads nothing more, and outlives the server's read and
	// write timeouts: each write has streamWriteWait instead, so that a
	// client that stops reading is let go.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(e event) bool {
		_, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.id, e.typ, e.data)
		return err == nil
	}
	if p == nil {
		v, _ := s.lookup(rec.ID)
		data, _ := json.Marshal(End{State: v.State, StopReason: v.StopReason, Error: v.Error, Summary: v.Summary, Usage: v.Usage})
		fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
		return
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
		list, missed, ended, changed := p.since(last)
		if missed > 0 {
			data, _ := json.Marshal(map[string]uint64{"missed": missed})
			if !write(event{id: last + missed, typ: "gap", data: data}) {
				return
			}
		}
		for _, e := range list {
			if !write(e) {
				return
			}
			last = e.id
		}
		if flusher != nil {
			flusher.Flush()
		}
		if ended {
			return
		}
		select {
		case <-changed:
		case <-tick.C:
			rc.SetWriteDeadline(time.Now().Add(streamWriteWait))
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		case <-r.Context().Done():
			return
		}
	}
}

// openStream counts an event stream of tok's, or answers 429 itself when
// the token has api.max_streams open already.
func (s *Server) openStream(w http.ResponseWriter, tok *tokenEntry) bool {
	s.mu.Lock()
	limit := cmpInt(s.cfg.MaxStreams, defaultMaxStreams)
	if s.streams[tok.Name] >= limit {
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		fail(w, http.StatusTooManyRequests, "", "token %s has %d event streams open, api.max_streams: close one first", tok.Name, limit)
		return false
	}
	s.streams[tok.Name]++
	s.mu.Unlock()
	return true
}

// closeStream counts an event stream of tok's closed.
func (s *Server) closeStream(tok *tokenEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[tok.Name]--; s.streams[tok.Name] <= 0 {
		delete(s.streams, tok.Name)
	}
}

// readAll reads a request's body (bounded by MaxBytesReader).
func readAll(r *http.Request) ([]byte, error) { return io.ReadAll(r.Body) }

// HeadlessThread reports whether thread is one a headless prompt opened
// (for Headless.Known).
func (s *Server) HeadlessThread(thread string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, ok := s.threads.get(thread)
	return ok
}
