package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// Now is the clock that TTLs, rate limits and Retry-After are read
	// from (nil: time.Now); read by Listen alone.
	Now func() time.Time
}

// Server serves the API on its own listener. Close stops it and returns
// once its goroutines are gone; prompts it started go on in the engine.
//
// Each piece of its state owns its lock: auth (tokens, rate limits,
// failures), keys (Idempotency-Keys), threads (headless threads),
// prompts (those in memory), streams and answers (counts). None of these
// locks is held while another is taken, nor while a prompt's own is;
// a prompt's lock is held while the store's and the engine's are taken,
// never the other way.
type Server struct {
	ln   *listener.Limited // nil for a Server that serves no listener (tests)
	http *http.Server
	ctx  context.Context // ends at Close: event streams end with it
	stop context.CancelFunc
	log  zerolog.Logger
	wg   sync.WaitGroup
	now  func() time.Time

	cfg     atomic.Pointer[Config]
	auth    *auth
	keys    *keys
	threads *threads
	prompts *registry
	streams *streams
	answers *answers
}

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
	s := newServer(cfg)
	s.ln = listener.Limit(ln, cmpInt(cfg.MaxConnections, defaultMaxConnections))
	s.http = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: readHeaderWait, ReadTimeout: readWait, WriteTimeout: writeWait,
		IdleTimeout: idleWait, ConnState: s.ln.ConnState(nil), BaseContext: func(net.Listener) context.Context { return s.ctx }}
	s.wg.Go(func() {
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("the API stopped serving")
		}
	})
	return s, nil
}

// newServer is a Server of cfg, with the prompts its store keeps
// recalled, serving nothing yet.
func newServer(cfg Config) *Server {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &Server{log: cfg.Logger, now: now, auth: newAuth(now), keys: newKeys(now), threads: newThreads(now),
		prompts: newRegistry(now), streams: &streams{open: map[string]int{}}, answers: &answers{by: map[int]uint64{}}}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.SetConfig(cfg)
	s.recall()
	return s
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
// reload); the fronts change too. Now is read by Listen alone.
func (s *Server) SetConfig(cfg Config) {
	s.cfg.Store(&cfg)
	s.auth.set(cfg.Tokens, cfg.RateLimit)
}

// Config is the configuration the Server serves with now.
func (s *Server) Config() Config { return *s.config() }

func (s *Server) config() *Config { return s.cfg.Load() }

// recall reads the prompts kept: the Idempotency-Keys of the last day,
// and the threads headless prompts opened.
func (s *Server) recall() {
	list, err := s.config().Store.Prompts()
	if err != nil {
		s.log.Warn().Err(err).Msg("the API's prompts could not be read")
	}
	// Oldest first, as the bounds drop them.
	slices.SortStableFunc(list, func(a, b store.Prompt) int { return a.Created.Compare(b.Created) })
	for _, p := range list {
		if p.Key != "" {
			s.keys.recall(p.Token, p.Key, p.ID, p.Digest, p.Created)
		}
		if p.Platform == "" {
			s.threads.use(p.Thread, p.Token, p.Created)
		}
	}
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
	st := metrics.APIStats{Requests: s.answers.counts(), Streams: s.streams.total()}
	if s.ln != nil {
		ls := s.ln.Stats()
		st.Connections, st.Evicted, st.Refused = ls.Open, ls.Evicted, ls.Refused
	}
	for _, p := range s.prompts.all() {
		if !p.ended() {
			st.Prompts++
		}
	}
	return st
}

// answers counts the requests answered, by status. It owns its lock,
// held by no one while another lock is taken.
type answers struct {
	mu sync.Mutex
	by map[int]uint64 // bounded by the statuses the API answers with
}

func (a *answers) count(status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.by[status]++
}

func (a *answers) counts() map[int]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.by)
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
		s.answers.count(cmpInt(c.status, http.StatusOK))
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
				if tok = s.auth.authenticate(w, r); tok == nil {
					return
				}
			}
			rt.handle(s, w, r, tok)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.auth.authenticate(w, r) == nil {
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
