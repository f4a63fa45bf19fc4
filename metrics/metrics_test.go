package metrics

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/metricstest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// family is the gathered family of that name, or nil.
func family(t *testing.T, m *Metrics, name string) *dto.MetricFamily {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// acp_broker_ready follows the readiness check, and build_info carries
// the version it was given.
func TestReadyAndBuildInfo(t *testing.T) {
	var unready error = errors.New("not connected yet")
	m := New(Sources{Ready: func() error { return unready }, Version: "v1.2.3"})
	ready := func() float64 {
		t.Helper()
		f := family(t, m, "acp_broker_ready")
		if f == nil {
			t.Fatal("no acp_broker_ready")
		}
		return f.Metric[0].GetGauge().GetValue()
	}
	if v := ready(); v != 0 {
		t.Errorf("ready = %v while a check fails", v)
	}
	unready = nil
	if v := ready(); v != 1 {
		t.Errorf("ready = %v once every check passes", v)
	}
	f := family(t, m, "acp_broker_build_info")
	if f == nil || !slices.ContainsFunc(f.Metric[0].Label, func(l *dto.LabelPair) bool { return l.GetName() == "version" && l.GetValue() == "v1.2.3" }) {
		t.Errorf("build_info: %v", f)
	}
}

// The API's counters are read at each scrape, each code under its own
// label.
func TestAPICounters_ReadAtScrape(t *testing.T) {
	requests := map[int]uint64{200: 3, 404: 1}
	c := &sideCollector{Sources{API: func() APIStats { return APIStats{Requests: maps.Clone(requests), Prompts: 2} }}}
	got := metricstest.Scrape(t, c)
	metricstest.Expect(t, got, dto.MetricType_COUNTER, map[string]float64{`acp_broker_api_requests_total{code="200"}`: 3, `acp_broker_api_requests_total{code="404"}`: 1})
	metricstest.Expect(t, got, dto.MetricType_GAUGE, map[string]float64{"acp_broker_api_prompts_running": 2})
	requests[500] = 1
	metricstest.Expect(t, metricstest.Scrape(t, c), dto.MetricType_COUNTER, map[string]float64{`acp_broker_api_requests_total{code="500"}`: 1})
}

// fixed is a collector of the test's own: one counter with a label,
// never counted.
type fixed struct{ d *prometheus.Desc }

func (f fixed) Describe(ch chan<- *prometheus.Desc) { ch <- f.d }
func (f fixed) Collect(chan<- prometheus.Metric)    {}

// What a registered collector describes is described, labels and help
// as it says, before any series of it is counted; a histogram is named
// without its series' suffixes; the same collector wrapped with a
// constant label for two platforms is described once, with that label.
func TestDescriptions_NameWhatIsDescribedBeforeItIsCounted(t *testing.T) {
	m := New(Sources{})
	c := fixed{prometheus.NewDesc("acp_broker_test_things_total", "Things, by kind.", []string{"kind", "by"}, nil)}
	m.Register(c)
	m.Register(prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "acp_broker_test_seconds", Help: "Seconds, by outcome."}, []string{"outcome"}))
	p := fixed{prometheus.NewDesc("acp_broker_test_calls_total", "Calls, by platform.", nil, nil)}
	m.Register(prometheus.WrapCollectorWith(prometheus.Labels{"platform": "discord"}, p))
	m.Register(prometheus.WrapCollectorWith(prometheus.Labels{"platform": "slack"}, p))
	got := map[string]Description{}
	for _, d := range m.Descriptions() {
		if _, ok := got[d.Name]; ok {
			t.Errorf("%s described twice", d.Name)
		}
		got[d.Name] = d
	}
	for _, want := range []Description{
		{Name: "acp_broker_test_things_total", Help: "Things, by kind.", Labels: []string{"by", "kind"}},
		{Name: "acp_broker_test_calls_total", Help: "Calls, by platform.", Labels: []string{"platform"}},
		{Name: "acp_broker_test_seconds", Help: "Seconds, by outcome.", Labels: []string{"outcome"}},
		{Name: "acp_broker_build_info", Help: "1, labelled with the broker's version, the VCS revision it was built from and its Go version.", Labels: []string{"goversion", "revision", "version"}},
	} {
		d := got[want.Name]
		if d.Help != want.Help || !slices.Equal(d.Labels, want.Labels) {
			t.Errorf("%s described as %+v, want %+v", want.Name, d, want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s is not described", name)
		}
	}
	if f := family(t, m, "acp_broker_test_things_total"); f != nil {
		t.Errorf("a metric never counted is gathered: %v", f)
	}
	if d := m.Described(); !slices.Equal(d["acp_broker_test_things_total"], []string{"by", "kind"}) {
		t.Errorf("Described: %v", d["acp_broker_test_things_total"])
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// get is the status and body of a GET of path from s.
func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// /metrics serves what is registered; /healthz and /readyz pass while
// their checks do, and a failing check is named with its error.
func TestServer_ServesMetricsAndNamesTheFailingCheck(t *testing.T) {
	var storeErr error
	m := New(Sources{Version: "v1"})
	s, err := Listen("127.0.0.1:0", m, []Check{{Name: "engine", Func: func() error { return nil }}},
		[]Check{{Name: "store", Func: func() error { return storeErr }}}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if code, body := get(t, s, "/metrics"); code != http.StatusOK || !strings.Contains(body, `acp_broker_build_info{goversion=`) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, body := get(t, s, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz while ready: %d %q", code, body)
	}
	storeErr = errors.New("disk full")
	if code, body := get(t, s, "/readyz"); code != http.StatusServiceUnavailable || body != "store: disk full\n" {
		t.Errorf("/readyz with the store failing: %d %q", code, body)
	}
	if code, body := get(t, s, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}
