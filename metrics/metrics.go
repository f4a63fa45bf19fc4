// Package metrics exposes the broker's gauges and counters to Prometheus
// and its health over HTTP: /metrics, /healthz and /readyz.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"acpbroker/adapter"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

const ns = "acp_broker"

// Sources are read at every scrape. Each may be nil.
type Sources struct {
	Engine func() adapter.Stats
	// Ready says why the broker is not ready (as /readyz does), or nil.
	Ready func() error
	// Version is the broker's, for acp_broker_build_info.
	Version string
	// API and Schedules, if set, are the HTTP API's and the schedules'.
	API       func() APIStats
	Schedules func() ScheduleStats
}

// Metrics is the broker's registry. It implements adapter.Observer for
// the histograms; everything else is read from Sources when scraped.
type Metrics struct {
	reg          *prometheus.Registry
	collectors   []prometheus.Collector // what reg has, for Described
	turnDuration *prometheus.HistogramVec
	firstChunk   prometheus.Histogram
}

var _ adapter.Observer = (*Metrics)(nil)

// New returns a registry reading src.
func New(src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		turnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "turn_duration_seconds",
			Help:    "How long turns took, from leaving the queue to their outcome, by outcome.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"outcome"}),
		firstChunk: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "turn_first_chunk_seconds",
			Help:    "Time from sending a prompt to the answer's first text.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120},
		}),
	}
	m.collectors = []prometheus.Collector{m.turnDuration, m.firstChunk, &collector{src: src}, &sideCollector{src: src},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.reg.MustRegister(m.collectors...)
	return m
}

// Register adds a package's own collector to the registry (its metrics
// are then among Described's).
func (m *Metrics) Register(c prometheus.Collector) {
	m.reg.MustRegister(c)
	m.collectors = append(m.collectors, c)
}

// A Description is one metric the registry may export, as its
// collector describes it: its name (a histogram's without its _bucket,
// _sum and _count series), its help, and its labels, sorted (those its
// collector was wrapped with among them, as a platform's).
type Description struct {
	Name, Help string
	Labels     []string
}

// maxLabels bounds the labels a described metric is tried with.
const maxLabels = 16

// Descriptions are the metrics the registry may export, whether or not
// a series of them has been counted yet, sorted by name; a metric
// described more than once (a platform's, for each platform) is given
// once. They are read by sampling each descriptor once into a registry
// of their own, as a scrape would export it.
func (m *Metrics) Descriptions() []Description {
	descs := make(chan *prometheus.Desc)
	go func() {
		for _, c := range m.collectors {
			c.Describe(descs)
		}
		close(descs)
	}()
	var s samples
	for d := range descs {
		s = append(s, d)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	families, _ := reg.Gather() // what failed is left out: every descriptor has been registered once
	out := make([]Description, 0, len(families))
	for _, f := range families {
		d := Description{Name: f.GetName(), Help: f.GetHelp()}
		if len(f.Metric) > 0 {
			for _, l := range f.Metric[0].Label {
				d.Labels = append(d.Labels, l.GetName())
			}
		}
		out = append(out, d)
	}
	return out
}

// Described are the names of every metric the registry may export, each
// with its labels: Descriptions as a map.
func (m *Metrics) Described() map[string][]string {
	out := map[string][]string{}
	for _, d := range m.Descriptions() {
		out[d.Name] = d.Labels
	}
	return out
}

// samples is a collector of one sample of each descriptor, its labels
// empty. It describes nothing, so that a descriptor may be sampled for
// each set of constant labels it was described with.
type samples []*prometheus.Desc

func (s samples) Describe(chan<- *prometheus.Desc) {}

func (s samples) Collect(ch chan<- prometheus.Metric) {
	for _, d := range s {
		for n := range maxLabels + 1 {
			if m, err := prometheus.NewConstMetric(d, prometheus.UntypedValue, 0, make([]string, n)...); err == nil {
				ch <- m
				break
			}
		}
	}
}

// TurnEnded implements adapter.Observer.
func (m *Metrics) TurnEnded(class string, d time.Duration) {
	m.turnDuration.WithLabelValues(class).Observe(d.Seconds())
}

// FirstChunk implements adapter.Observer.
func (m *Metrics) FirstChunk(d time.Duration) { m.firstChunk.Observe(d.Seconds()) }

// Registry is the Prometheus registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// collector turns the Sources' snapshots into metrics at scrape time.
type collector struct{ src Sources }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

var (
	dBuildInfo       = desc("build_info", "1, labelled with the broker's version, the VCS revision it was built from and its Go version.", "version", "revision", "goversion")
	dReady           = desc("ready", "1 while the broker is ready (as /readyz says: every chat platform connected, the state store writing, the engine answering), else 0.")
	dAgentsMax       = desc("agents_max", "Agent processes at most, of all profiles (pool.max_sessions).")
	dProfileMax      = desc("profile_agents_max", "Agent processes at most of a profile with a bound of its own (max_sessions), by agent profile.", "profile")
	dAgentsLive      = desc("agents_live", "Agent processes running.")
	dAgentsBusy      = desc("agents_busy", "Agent processes running a turn.")
	dAgentsStarting  = desc("agents_starting", "Agent processes being started.")
	dProfileLive     = desc("profile_agents_live", "Agent processes running, by agent profile.", "profile")
	dProfileBusy     = desc("profile_agents_busy", "Agent processes running a turn, by agent profile.", "profile")
	dTurnsRunning    = desc("turns_running", "Turns running.")
	dPromptsWaiting  = desc("prompts_waiting", "Prompts not yet running, by state: queued behind a thread's turn, or waiting for an agent slot.", "state")
	dTurns           = desc("turns_total", "Turns ended, by outcome (done, stopped, or the failure's cause).", "outcome")
	dPermissions     = desc("permission_decisions_total", "Agent permission requests answered, by outcome (allowed, rejected, cancelled) and by whom (user, rule, mode, timeout, cancelled, unanswered).", "outcome", "by")
	dSpawns          = desc("agent_spawns_total", "Agent processes started.")
	dSpawnFailures   = desc("agent_spawn_failures_total", "Agent processes that could not be started.")
	dStops           = desc("agent_stops_total", "Agent processes stopped, by reason.", "reason")
	dKills           = desc("agent_kills_total", "Agent process groups killed without a grace.")
	dOutOfMemory     = desc("agent_oom_kills_total", "Agent processes that ran out of memory: killed by the kernel for their memory limit (memory_max).")
	dCgroups         = desc("agent_cgroups", "Agents' control groups made and not yet removed.")
	dPendingRequests = desc("acp_pending_requests", "JSON-RPC requests to agents awaiting an answer.")
	dPendingPerms    = desc("acp_pending_permission_requests", "Agent permission requests not yet answered.")
	dStale           = desc("acp_stale_responses_total", "Agent responses dropped because no live request had their id.")
	dJunk            = desc("acp_junk_lines_total", "Agent output lines skipped because they were not JSON-RPC.")
	dOversize        = desc("acp_oversize_lines_total", "Agent output lines skipped for exceeding the size cap.")
	dLateUpdates     = desc("acp_late_updates_total", "Session updates that arrived with no turn listening.")
	dEarlyDropped    = desc("acp_early_updates_dropped_total", "Session updates for sessions not known dropped: none was being created, or past the bounds of what is kept until one is.")
	dDroppedUpdates  = desc("acp_dropped_updates_total", "Session updates dropped because a turn's queue was full.")
	dBadMessages     = desc("acp_bad_messages_total", "Agent messages with unusable parameters.")
	dAgentRequests   = desc("acp_agent_requests_in_flight", "Agent requests (permission, files) being served.")
	dRefusedRequests = desc("acp_agent_requests_refused_total", "Agent requests refused for being past agent.max_requests.")
	dInvalidRequests = desc("acp_invalid_requests_total", "Agent requests answered -32600: batches, unreadable ids.")
	dUnsentAnswers   = desc("acp_agent_answers_unsent_total", "Answers to refused, unknown or invalid agent requests not sent: the agent read nothing while they waited.")
	dUnknownOptions  = desc("acp_unknown_config_options_total", "Session configuration options skipped for a type the broker does not know, or unusable fields.")
	dOptionThreads   = desc("thread_option_states", "Threads whose agents' options, modes and commands the engine keeps.")
	dTerminalsOpen   = desc("terminals_open", "Terminals agents have open (created and not yet released), running or ended.")
	dUnknown         = desc("acp_unknown_total", "Session updates of unknown kinds, and content items of unknown types, ignored.", "what")
	dUsageThreads    = desc("threads_with_usage", "Threads whose agent's last token usage is kept for /status.")
	dWatchdog        = desc("watchdog_actions_total", "Watchdog actions, by action.", "action")
)

// The agent's questions (elicitation).
var (
	dElicitations   = desc("elicitations_total", "The agent's questions answered, by action (accept, decline, cancel) and by whom (user, timeout, cancelled, unanswered).", "action", "by")
	dPendingElicits = desc("acp_pending_elicitations", "The agent's questions not yet answered.")
	dSessionsClosed = desc("agent_sessions_closed_total", "Agent sessions closed with session/close before their agents were stopped for idleness.")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dAgentsLive, dAgentsBusy, dAgentsStarting, dProfileLive, dProfileBusy, dTurnsRunning, dPromptsWaiting, dTurns, dPermissions,
		dSpawns, dSpawnFailures, dStops, dKills, dOutOfMemory, dCgroups, dPendingRequests, dPendingPerms, dStale, dJunk, dOversize, dLateUpdates, dEarlyDropped,
		dDroppedUpdates, dBadMessages, dAgentRequests, dRefusedRequests, dInvalidRequests, dUnsentAnswers, dUnknownOptions, dOptionThreads, dTerminalsOpen, dUnknown, dUsageThreads, dWatchdog} {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{dElicitations, dPendingElicits, dBuildInfo, dReady, dAgentsMax, dProfileMax, dSessionsClosed} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(dBuildInfo, 1, c.src.Version, buildRevision(), runtime.Version())
	if c.src.Ready != nil {
		ready := 1.0
		if runCheck(Check{Name: "ready", Func: c.src.Ready}) != nil {
			ready = 0
		}
		gauge(dReady, ready)
	}
	if c.src.Engine != nil {
		e := c.src.Engine()
		p := e.Pool
		gauge(dAgentsMax, float64(p.MaxSessions))
		gauge(dAgentsLive, float64(p.Live))
		gauge(dAgentsBusy, float64(p.Busy))
		gauge(dAgentsStarting, float64(p.Starting))
		for name, ps := range p.Profiles {
			gauge(dProfileLive, float64(ps.Live), name)
			gauge(dProfileBusy, float64(ps.Busy), name)
			if ps.MaxSessions > 0 {
				gauge(dProfileMax, float64(ps.MaxSessions), name)
			}
		}
		gauge(dTurnsRunning, float64(e.Running))
		gauge(dPromptsWaiting, float64(e.Queued), "queued")
		gauge(dPromptsWaiting, float64(p.Waiting), "waiting_for_slot")
		for class, n := range e.Outcomes {
			counter(dTurns, n, class)
		}
		for class, n := range e.Permissions {
			counter(dPermissions, n, class.Outcome, class.Via)
		}
		counter(dSpawns, p.Spawned)
		counter(dSpawnFailures, p.SpawnFailed)
		for reason, n := range p.Stopped {
			counter(dStops, n, reason)
		}
		counter(dKills, p.Killed)
		counter(dOutOfMemory, p.OutOfMemory)
		counter(dSessionsClosed, p.SessionsClosed)
		gauge(dCgroups, float64(p.Cgroups))
		gauge(dPendingRequests, float64(p.Conn.PendingRequests))
		gauge(dPendingPerms, float64(p.Conn.PendingPermissions))
		gauge(dPendingElicits, float64(p.Conn.PendingElicitations))
		for class, n := range e.Elicitations {
			counter(dElicitations, n, class.Outcome, class.Via)
		}
		counter(dStale, p.Conn.StaleResponses)
		counter(dJunk, p.Conn.JunkLines)
		counter(dOversize, p.Conn.OversizeLines)
		counter(dLateUpdates, p.Conn.LateUpdates)
		counter(dEarlyDropped, p.Conn.EarlyDropped)
		counter(dDroppedUpdates, p.Conn.DroppedUpdates)
		counter(dBadMessages, p.Conn.BadMessages)
		gauge(dAgentRequests, float64(p.Conn.AgentRequests))
		counter(dRefusedRequests, p.Conn.RefusedRequests)
		counter(dInvalidRequests, p.Conn.InvalidRequests)
		counter(dUnsentAnswers, p.Conn.UnsentAnswers)
		counter(dUnknownOptions, p.Conn.UnknownConfigOptions)
		gauge(dOptionThreads, float64(e.OptionThreads))
		gauge(dTerminalsOpen, float64(p.Conn.TerminalsOpen))
		counter(dUnknown, p.Conn.UnknownUpdates, "update")
		counter(dUnknown, p.Conn.UnknownContent, "content")
		gauge(dUsageThreads, float64(e.UsageThreads))
		counter(dWatchdog, e.ToolStuck, "cancel_stuck_tool")
		counter(dWatchdog, e.ForceEnded, "force_end")
		counter(dWatchdog, p.Stopped["idle"], "stop_idle_agent")
	}
}

// buildRevision is the VCS revision the binary was built from ("" if
// unknown).
func buildRevision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// Check is one named health condition; it returns nil when healthy.
type Check struct {
	Name string
	Func func() error
}

// readHeaderWait bounds how long a client of the metrics server may take
// to send its request's headers: a connection that sends none is closed
// instead of held open for ever.
const readHeaderWait = 5 * time.Second

// Server serves /metrics, /healthz (the broker's loop answers) and
// /readyz (every readiness check passes).
type Server struct {
	srv  *http.Server
	ln   net.Listener
	log  zerolog.Logger
	done chan struct{}

	ready []Check
	live  []Check
}

// Listen starts serving on addr (host:port; port 0 picks one).
func Listen(addr string, m *Metrics, live, ready []Check, log zerolog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen %s: %w", addr, err)
	}
	s := &Server{ln: ln, log: log, done: make(chan struct{}), live: live, ready: ready}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { s.serveChecks(w, s.live) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { s.serveChecks(w, s.ready) })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderWait}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	return s, nil
}

// Addr is the address served.
func (s *Server) Addr() string { return s.ln.Addr().String() }

func (s *Server) serveChecks(w http.ResponseWriter, checks []Check) {
	var failed []string
	for _, c := range checks {
		if err := runCheck(c); err != nil {
			failed = append(failed, c.Name+": "+err.Error())
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(failed) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, strings.Join(failed, "\n"))
		return
	}
	fmt.Fprintln(w, "ok")
}

// checkTimeout bounds one health check: well under the few seconds a
// probe (systemd's watchdog, a load balancer) waits for /readyz.
const checkTimeout = 2 * time.Second

// runCheck runs a check with a deadline: a check that hangs (a deadlocked
// loop) fails instead of hanging the probe.
func runCheck(c Check) error {
	res := make(chan error, 1)
	go func() { res <- c.Func() }()
	t := time.NewTimer(checkTimeout)
	defer t.Stop()
	select {
	case err := <-res:
		return err
	case <-t.C:
		return fmt.Errorf("no answer within %s", checkTimeout)
	}
}

// Close stops serving within the time ctx allows.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}
