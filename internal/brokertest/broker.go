package brokertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Broker is the broker binary running as a process of the test.
type Broker struct {
	w    *World
	cmd  *exec.Cmd
	Log  *Log
	done chan struct{}
	addr string
	// apiAddr is the HTTP API's address, once it serves; webAddr the web
	// front end's.
	apiAddr, webAddr string
	http             *http.Client
	// slackConns are the Socket Mode connections the fake Slack had
	// accepted before the broker started.
	slackConns int
	// host is set for `broker host`, whose readiness is its own.
	host bool
	// group is set when the process leads a process group of its own,
	// which Kill and the cleanup end whole.
	group bool
}

func start(w *World, config, logPath string, command ...string) (*Broker, error) {
	return startVia(w, nil, config, logPath, command...)
}

// startVia is start with the broker run through via (a program and its
// arguments that exec the rest, as `ip netns exec NAME` does), in a
// process group of its own, which its cleanup kills whole.
func startVia(w *World, via []string, config, logPath string, command ...string) (*Broker, error) {
	log, err := newLog(logPath, 256<<10)
	if err != nil {
		return nil, err
	}
	b := &Broker{w: w, Log: log, done: make(chan struct{}), slackConns: w.slackConnections(),
		http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	args := append(append(append([]string{}, via...), w.Bins.Broker), append(command, "--config", config)...)
	b.cmd = exec.Command(args[0], args[1:]...)
	b.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir}, w.Env...)
	b.cmd.Stdout = log
	b.cmd.Stderr = log
	if w.BrokerUser != nil {
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: w.BrokerUser}
	}
	if len(via) > 0 {
		if b.cmd.SysProcAttr == nil {
			b.cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		b.cmd.SysProcAttr.Setpgid = true
		b.group = true
	}
	b.cmd.WaitDelay = 5 * time.Second
	if err := b.cmd.Start(); err != nil {
		log.close()
		return nil, err
	}
	go func() {
		b.cmd.Wait()
		log.close()
		close(b.done)
	}()
	return b, nil
}

// serving is the log line that names the metrics address; servingAPI
// the one that names the HTTP API's.
const (
	serving    = "serving /metrics, /healthz and /readyz"
	servingAPI = "serving the HTTP API"
	servingWeb = "serving the web front end"
)

// APIAddr is the address of the HTTP API ("" without api.listen).
func (b *Broker) APIAddr() string { return b.apiAddr }

// WebAddr is the address the web front end listens on (web.listen set).
func (b *Broker) WebAddr() string { return b.webAddr }

// awaitReady waits for the broker to serve HTTP (if configured), for
// /readyz to say it is connected, for its slash commands on Discord,
// and for the fake Slack to reach it.
func (b *Broker) awaitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	wait := func(what string) error {
		select {
		case <-b.done:
			return fmt.Errorf("the broker exited with status %d %s; log:\n%s", b.ExitCode(), what, b.Log.Tail(16<<10))
		case <-ctx.Done():
			return fmt.Errorf("the broker did not get ready (%s): %w; log:\n%s", what, context.Cause(ctx), b.Log.Tail(16<<10))
		case <-tick.C:
			return nil
		}
	}
	if listen, _ := b.w.Conf["http.listen"].(string); listen != "" {
		for b.addr == "" {
			if b.addr = b.Log.Field(serving, "addr"); b.addr != "" {
				break
			}
			if err := wait("before serving HTTP"); err != nil {
				return err
			}
		}
		for {
			if code, _, _ := b.Get(ctx, "/readyz"); code == http.StatusOK {
				break
			}
			if err := wait("before /readyz said ready"); err != nil {
				return err
			}
		}
	}
	if listen, _ := b.w.Conf["api.listen"].(string); listen != "" {
		for b.apiAddr == "" {
			if b.apiAddr = b.Log.Field(servingAPI, "addr"); b.apiAddr != "" {
				break
			}
			if err := wait("before serving the API"); err != nil {
				return err
			}
		}
	}
	if listen, _ := b.w.Conf["web.listen"].(string); listen != "" {
		for b.webAddr == "" {
			if b.webAddr = b.Log.Field(servingWeb, "addr"); b.webAddr != "" {
				break
			}
			if err := wait("before serving the web front end"); err != nil {
				return err
			}
		}
	}
	if b.w.serves("discord") {
		for !b.w.Srv.Connected() || len(b.w.Srv.Commands()) < 5 {
			if err := wait("before registering its commands"); err != nil {
				return err
			}
		}
	}
	if b.w.serves("slack") && b.w.Slack != nil {
		if err := b.w.slackReady(b.slackConns, wait); err != nil {
			return err
		}
	}
	return nil
}

// PID is the broker's process id.
func (b *Broker) PID() int { return b.cmd.Process.Pid }

// Addr is the address of /metrics, /healthz and /readyz ("" without
// http.listen).
func (b *Broker) Addr() string { return b.addr }

// Done is closed once the process has exited and been reaped.
func (b *Broker) Done() <-chan struct{} { return b.done }

// Exited reports whether the process has exited.
func (b *Broker) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status (-1 if a signal ended it); call it after
// Done.
func (b *Broker) ExitCode() int { return b.cmd.ProcessState.ExitCode() }

// Signalled is the signal that ended the broker, if one did.
func (b *Broker) Signalled() syscall.Signal {
	if b.cmd.ProcessState == nil {
		return 0
	}
	if ws, ok := b.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// ErrStopTimeout is returned by Stop when the broker had to be killed.
var ErrStopTimeout = errors.New("the broker did not exit after SIGTERM")

// Stop sends SIGTERM and waits for the broker to exit; after timeout it
// kills it and returns ErrStopTimeout. It returns the exit status and is
// safe to call again (it then returns the status again).
func (b *Broker) Stop(timeout time.Duration) (int, error) {
	if b.Exited() {
		return b.ExitCode(), nil
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.done:
		return b.ExitCode(), nil
	case <-t.C:
		b.cmd.Process.Kill()
		<-b.done
		return b.ExitCode(), fmt.Errorf("%w within %s; killed", ErrStopTimeout, timeout)
	}
}

// Signal sends sig to the broker; it does not wait.
func (b *Broker) Signal(sig os.Signal) error { return b.cmd.Process.Signal(sig) }

// Kill ends the broker with SIGKILL and waits until it is reaped.
func (b *Broker) Kill() {
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.done
	b.killGroup()
}

// killGroup ends what is left of the process's own group, if it has one.
func (b *Broker) killGroup() {
	if b.group {
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Get fetches a path of the broker's HTTP server and returns the status
// and body.
func (b *Broker) Get(ctx context.Context, path string) (int, string, error) {
	if b.addr == "" {
		return 0, "", errors.New("the broker serves no HTTP (http.listen is empty)")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// Metrics scrapes /metrics.
func (b *Broker) Metrics(ctx context.Context) (Metrics, error) {
	code, body, err := b.Get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d: %s", code, body)
	}
	return ParseMetrics(body), nil
}

// AwaitMetrics scrapes /metrics every interval until cond holds, and
// returns the last scrape; on ctx's end it returns the last scrape and
// the cause.
func (b *Broker) AwaitMetrics(ctx context.Context, interval time.Duration, cond func(Metrics) bool) (Metrics, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last Metrics
	for {
		m, err := b.Metrics(ctx)
		if err == nil {
			last = m
			if cond(m) {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// RSS is the broker's resident set size, from /proc/<pid>/status.
func (b *Broker) RSS() (int64, error) { return RSS(b.PID()) }

// RSS reads a process's resident set size (VmRSS) from
// /proc/<pid>/status.
func RSS(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// PeakRSS reads a process's peak resident set size (VmHWM) from
// /proc/<pid>/status.
func PeakRSS(pid int) (int64, error) { return procStatusBytes(pid, "VmHWM") }

// procStatusBytes reads a field in kB of /proc/<pid>/status, in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// Metrics are the series of one scrape, by their full name with labels
// as exposed (`acp_broker_turns_total{outcome="done"}`).
type Metrics map[string]float64

// ParseMetrics reads the Prometheus text format; comments and lines it
// cannot read are skipped.
func ParseMetrics(text string) Metrics {
	m := Metrics{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			continue
		}
		m[strings.TrimSpace(line[:i])] = v
	}
	return m
}

// Sum adds up every series of the metric name, whatever its labels.
func (m Metrics) Sum(name string) float64 {
	total := 0.0
	for series, v := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			total += v
		}
	}
	return total
}

// Grep returns the series whose names start with prefix, one per line,
// sorted.
func (m Metrics) Grep(prefix string) string {
	var out []string
	for series, v := range m {
		if strings.HasPrefix(series, prefix) {
			out = append(out, series+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
