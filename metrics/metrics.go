// Package metrics serves the broker's registry of Prometheus collectors
// and its health over HTTP: /metrics, /healthz and /readyz. Each package
// that counts something is its own collector, registered where the
// broker is wired; metrics imports none of them.
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

	"acpbroker/listener"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
)

const ns = "acp_broker"

// Sources are read at every scrape. Each may be nil.
type Sources struct {
	// Ready says why the broker is not ready (as /readyz does), or nil.
	Ready func() error
	// Version is the broker's, for acp_broker_build_info.
	Version string
	// API, if set, are the HTTP API's counters.
	API func() APIStats
}

// Metrics is the broker's registry. It reads build_info, ready and the
// API's counters from Sources when scraped, and serves every collector
// Register is given.
type Metrics struct {
	reg        *prometheus.Registry
	collectors []prometheus.Collector // what reg has, for Described
}

// New returns a registry reading src.
func New(src Sources) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.collectors = []prometheus.Collector{&collector{src: src}, &sideCollector{src: src},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}
	m.reg.MustRegister(m.collectors...)
	return m
}

// Register adds a package's own collector to the registry (its metrics
// are then among Descriptions'). It panics if c describes a metric
// already registered with the same labels' values; it is for wiring the
// broker, before Descriptions is called.
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

// Registry is the Prometheus registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// collector turns the Sources' snapshots into metrics at scrape time.
type collector struct{ src Sources }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

var (
	dBuildInfo = desc("build_info", "1, labelled with the broker's version, the VCS revision it was built from and its Go version.", "version", "revision", "goversion")
	dReady     = desc("ready", "1 while the broker is ready (as /readyz says: every chat platform connected, the state store writing, the engine answering), else 0.")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dBuildInfo
	ch <- dReady
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(dBuildInfo, 1, c.src.Version, buildRevision(), runtime.Version())
	if c.src.Ready != nil {
		ready := 1.0
		if runCheck(Check{Name: "ready", Func: c.src.Ready}) != nil {
			ready = 0
		}
		gauge(dReady, ready)
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
// instead of held open for ever. A request has readWait, an answer
// writeWait, a kept connection idleWait before its next request; at most
// maxConns connections are open (a scraper and a probe or two need few).
const (
	readHeaderWait = 5 * time.Second
	readWait       = 10 * time.Second
	writeWait      = 30 * time.Second
	idleWait       = 30 * time.Second
	maxConns       = 64
)

// Server serves /metrics, /healthz (the broker's loop answers) and
// /readyz (every readiness check passes).
type Server struct {
	srv  *http.Server
	ln   *listener.Limited
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
	s := &Server{ln: listener.Limit(ln, maxConns), log: log, done: make(chan struct{}), live: live, ready: ready}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { s.serveChecks(w, s.live) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) { s.serveChecks(w, s.ready) })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderWait, ReadTimeout: readWait, WriteTimeout: writeWait, IdleTimeout: idleWait,
		ConnState: s.ln.ConnState(nil)}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
