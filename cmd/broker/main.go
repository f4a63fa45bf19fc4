// Command broker connects chat conversations to Agent Client Protocol
// agents: one agent process per thread, streamed answers, permission
// questions put to people.
//
// Usage:
//
//	broker [run] --config FILE     serve (the default command)
//	broker check-config --config FILE
//	broker audit [--since 24h] [--thread ID] [--json] --config FILE
//	                               permission decisions kept in state.dir
//	                               (a running broker is asked on its
//	                               socket there)
//	broker version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"acpbroker/cgroup"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

var version = "dev"

func main() {
	// No process of the same user (an agent run without a sandbox, say)
	// may read the broker's memory or /proc/<pid>/environ, which hold the
	// Discord token and the agents' keys.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "broker: could not make the process non-dumpable:", err)
		os.Exit(1)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

// run is the program with its inputs explicit; it returns the exit status:
// 0 after a clean stop, 1 when serving failed, 2 for bad usage or config.
func run(ctx context.Context, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "version":
		fmt.Fprintf(stdout, "acp-broker %s (commit %s, %s)\n", version, commit(), runtime.Version())
		return 0
	case "audit":
		return audit(args, environ, stdout, stderr)
	case "run", "check-config":
	default:
		fmt.Fprintf(stderr, "broker: unknown command %q (want run, check-config, audit or version)\n", cmd)
		return 2
	}
	fs := flag.NewFlagSet("broker "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML configuration `file`")
	platform := fs.String("platform", "", "chat platform: console or discord (overrides chat.platform)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *platform != "" {
		environ = append(environ, "BROKER_CHAT_PLATFORM="+*platform)
	}
	cfg, err := LoadConfig(*configPath, environ)
	if err != nil {
		fmt.Fprintln(stderr, "broker:", err)
		return 2
	}
	if _, err := buildProfiles(cfg, environ, nil, nil, zerolog.Nop()); err != nil {
		fmt.Fprintln(stderr, "broker: config:", err)
		return 2
	}
	var problems []error
	if err := checkWritable("state.dir", cfg.State.Dir); err != nil {
		problems = append(problems, err)
	}
	problems = append(problems, checkProfiles(ctx, cfg, gitConfiner(cfg, *configPath))...)
	problems = append(problems, checkSandbox(cfg, *configPath)...)
	if err := sandboxFor(cfg, *configPath).Check(sandboxCheckTimeout, cfg.Agent.RunAs); err != nil {
		problems = append(problems, fmt.Errorf("agent.sandbox = %q: %w", cfg.Agent.Sandbox, err))
	}
	if len(problems) > 0 {
		fmt.Fprintln(stderr, "broker: config:", errors.Join(problems...))
		return 2
	}
	if cmd == "check-config" {
		for _, w := range cfg.Warnings {
			fmt.Fprintln(stderr, "broker: warning:", w)
		}
		if cfg.Agent.Sandbox != "launcher" && limitsSet(cfg) {
			if _, err := cgroup.Probe(); err != nil {
				fmt.Fprintf(stderr, "broker: warning: memory_max and pids_max: %v; agents run without resource limits\n", err)
			}
		}
		fmt.Fprintln(stdout, "configuration is valid")
		return 0
	}

	log, level := newLogger(cfg.Log.Format, cfg.Log.Level, stderr)
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	b, err := open(cfg, *configPath, environ, log, level, stdin, stdout)
	if err != nil {
		log.Error().Err(err).Msg("broker did not start")
		fmt.Fprintln(stderr, "broker:", err)
		return 1
	}
	serveErr := b.serve(ctx, signals, func() { os.Exit(1) })
	log.Info().Dur("grace", b.cfg.Shutdown.Grace).Msg("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), b.cfg.Shutdown.Grace)
	b.stop(stopCtx)
	cancel()
	if serveErr != nil {
		log.Error().Err(serveErr).Msg("broker stopped")
		fmt.Fprintln(stderr, "broker:", serveErr)
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

// commit is the VCS revision the binary was built from, if known.
func commit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// envLookup looks names up in an os.Environ-style list; later entries win.
func envLookup(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
