package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"acpbroker/broker"
	"acpbroker/internal/brokertest"

	dto "github.com/prometheus/client_model/go"
)

// The systemd unit parses (systemd-analyze verify), is Type=notify with a
// watchdog, and its hardening leaves the state directory writable and
// the unit's control group the broker's to divide among its agents.
func TestPackaging_UnitFileVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile("../../packaging/broker.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "User=acp-broker", "StateDirectory=acp-broker",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ReadWritePaths=/var/lib/acp-broker", "PrivateTmp=yes",
		"EnvironmentFile=", "ExecReload=/bin/kill -HUP $MAINPID", "Delegate=yes"} {
		if !strings.Contains(unit, want+"") {
			t.Errorf("unit lacks %s", want)
		}
	}
	// Agents' control groups are made under the unit's.
	if strings.Contains(unit, "\nProtectControlGroups=yes") {
		t.Error("the unit makes the cgroup file system read-only, where agents' control groups are made")
	}
	// verify wants the ExecStart program to exist.
	dir := t.TempDir()
	path := filepath.Join(dir, "acp-broker.service")
	os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/acp-broker", "/bin/true")), 0o644)
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// The files of packaging/ that name the broker's metrics: the Grafana
// dashboard, the Prometheus alerting rules and their tests.
var metricFiles = []string{"../../packaging/grafana/acp-broker.json", "../../packaging/prometheus/acp-broker.rules.yml",
	"../../packaging/prometheus/acp-broker.rules.test.yml"}

// metricName is how a metric's name begins, in a PromQL expression or
// anywhere in those files: the broker's own, and the Go and process
// collectors'.
var metricName = regexp.MustCompile(`\b(?:acp_broker|process|go)_[a-zA-Z0-9_]+`)

// selector is a metric's name followed by its label matchers.
var selector = regexp.MustCompile(`\b((?:acp_broker|process|go)_[a-zA-Z0-9_]+)\{([^}]*)\}`)

// matcher is one label matcher of a selector.
var matcher = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)

// exported is the metric a name in a query means: a histogram's
// _bucket, _sum and _count series are the histogram's.
func exported(described map[string][]string, name string) (string, bool) {
	if _, ok := described[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := described[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

// Every metric the dashboard, the alerting rules and their tests name is
// one a running broker's registry exports, with the labels they match
// on; and the metrics they are built on say what they should: ready 0
// until the chat platform is connected and 1 once it is, the pool's
// bound, the version.
func TestPackaging_DashboardAndAlertsNameOnlyWhatTheBrokerExports(t *testing.T) {
	// It joins a cluster of its own, so that the cluster's metrics are
	// exported too.
	w := brokertest.NewWorld(t, brokertest.Binaries{Agent: fakeAgent}, brokertest.Options{Conf: brokertest.Settings{"pool.max_sessions": 3,
		"cluster.embedded": true, "cluster.listen": fmt.Sprintf("127.0.0.1:%d", freePort(t))}})
	cfg, err := w.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.OpenConfig(cfg, broker.Options{Version: "v9.9.9-test"})
	if err != nil {
		t.Fatal(err)
	}
	described := b.Metrics().Described()
	gauge := func(name string) (float64, *dto.Metric) {
		t.Helper()
		families, err := b.Metrics().Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if _, ok := described[f.GetName()]; !ok {
				t.Errorf("the registry exports %s, which its collectors do not describe", f.GetName())
			}
			if f.GetName() == name && len(f.Metric) == 1 {
				return f.Metric[0].GetGauge().GetValue(), f.Metric[0]
			}
		}
		t.Fatalf("no gauge %s", name)
		return 0, nil
	}
	if v, _ := gauge("acp_broker_ready"); v != 0 {
		t.Errorf("acp_broker_ready = %v before the platform connected", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := gauge("acp_broker_ready"); v != 1 {
		t.Errorf("acp_broker_ready = %v once connected", v)
	}
	if v, _ := gauge("acp_broker_agents_max"); v != 3 {
		t.Errorf("acp_broker_agents_max = %v, want pool.max_sessions, 3", v)
	}
	if _, m := gauge("acp_broker_build_info"); !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool {
		return l.GetName() == "version" && l.GetValue() == "v9.9.9-test"
	}) {
		t.Errorf("acp_broker_build_info is labelled %v", m.Label)
	}

	used := map[string]bool{}
	for _, path := range metricFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.HasSuffix(path, ".json") {
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// The queries as Grafana reads them, escapes undone.
			var exprs []string
			var walk func(any)
			walk = func(v any) {
				switch v := v.(type) {
				case map[string]any:
					for k, x := range v {
						if s, ok := x.(string); ok && (k == "expr" || k == "definition" || k == "query") {
							exprs = append(exprs, s)
						}
						walk(x)
					}
				case []any:
					for _, x := range v {
						walk(x)
					}
				}
			}
			walk(v)
			if len(exprs) < 40 {
				t.Fatalf("%s: %d queries", path, len(exprs))
			}
			text = strings.Join(exprs, "\n")
		}
		for _, name := range metricName.FindAllString(text, -1) {
			base, ok := exported(described, name)
			if !ok {
				t.Errorf("%s names %s, which the broker does not export", path, name)
				continue
			}
			used[base] = true
		}
		for _, m := range selector.FindAllStringSubmatch(text, -1) {
			base, ok := exported(described, m[1])
			if !ok {
				continue
			}
			for _, l := range matcher.FindAllStringSubmatch(m[2], -1) {
				label := l[1]
				if label == "job" || label == "instance" || label == "le" && base != m[1] {
					continue
				}
				if !slices.Contains(described[base], label) {
					t.Errorf("%s matches %s on %q, which it is not labelled with (%v)", path, m[1], label, described[base])
				}
			}
		}
	}
	if len(used) < 40 {
		t.Errorf("the files name %d of the broker's metrics", len(used))
	}
}

// promtool is the path of promtool: on PATH, or where make promtool-deps
// puts it. Without it the test is skipped, but not in CI.
func promtool(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("promtool"); err == nil {
		return path
	}
	if path, err := filepath.Abs("../../bin/promtool"); err == nil {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("promtool is missing in CI: make promtool-deps installs it")
	}
	t.Skip("promtool is not installed (make promtool-deps, as root, installs it from the Debian package prometheus)")
	return ""
}

// The alerting rules are valid (promtool check rules), and each alert
// fires when, and only when, its tests say (promtool test rules).
func TestPackaging_AlertRulesCheckAndPassTheirTests(t *testing.T) {
	bin := promtool(t)
	dir := "../../packaging/prometheus"
	for _, args := range [][]string{{"check", "rules", "acp-broker.rules.yml"}, {"test", "rules", "acp-broker.rules.test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has tests.
	rules, err := os.ReadFile(filepath.Join(dir, "acp-broker.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "acp-broker.rules.test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 10 {
		t.Fatalf("%d alerts", len(alerts))
	}
	for _, a := range alerts {
		if !regexp.MustCompile(`alertname: ` + a[1] + `\n\s+exp_alerts:\n\s+- exp_labels:`).Match(tests) {
			t.Errorf("no test sees %s fire", a[1])
		}
	}
}
