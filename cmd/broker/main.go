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
//	broker audit --schedules [--schedule NAME] [--since 24h] [--json] --config FILE
//	                               the schedules' runs and their outcomes
//	broker version
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"acpbroker/broker"
	"acpbroker/cgroup"
	"acpbroker/config"

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
	platform := fs.String("platform", "", "chat platforms: console, or discord and others, separated by commas (overrides chat.platform)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *platform != "" {
		environ = append(environ, "BROKER_CHAT_PLATFORM="+*platform)
	}
	cfg, err := config.Load(*configPath, environ)
	if err != nil {
		fmt.Fprintln(stderr, "broker:", err)
		return 2
	}
	if err := broker.Check(ctx, cfg, environ); err != nil {
		fmt.Fprintln(stderr, "broker: config:", err)
		return 2
	}
	if cmd == "check-config" {
		for _, w := range cfg.Warnings {
			fmt.Fprintln(stderr, "broker: warning:", w)
		}
		if cfg.Agent.Sandbox != "launcher" && cfg.Limited() {
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
	b, err := broker.Open(cfg, broker.Options{Environ: environ, Logger: log, SetLevel: level.set, Version: version, Stdin: stdin, Stdout: stdout})
	if err != nil {
		log.Error().Err(err).Msg("broker did not start")
		fmt.Fprintln(stderr, "broker:", err)
		return 1
	}
	serveErr := serve(ctx, b, signals, log, func() { os.Exit(1) })
	grace := b.Config().Shutdown.Grace
	log.Info().Dur("grace", grace).Msg("shutting down")
	stopCtx, cancel := context.WithTimeout(context.Background(), grace)
	b.Stop(stopCtx)
	cancel()
	if serveErr != nil {
		log.Error().Err(serveErr).Msg("broker stopped")
		fmt.Fprintln(stderr, "broker:", serveErr)
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

// serve runs b until ctx ends or its platforms' input ends. Signals:
// SIGHUP reloads; SIGTERM or SIGINT stops; a second one forces an
// immediate exit after killing every agent's process group.
func serve(ctx context.Context, b *broker.Broker, signals <-chan os.Signal, log zerolog.Logger, forceExit func()) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx) }()
	for {
		select {
		case err := <-served:
			return err
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				b.Reload()
				continue
			}
			log.Info().Str("signal", sig.String()).Msg("stopping")
			stop()
			go forceOnSecondSignal(b, signals, time.Now(), log, forceExit)
			return <-served
		}
	}
}

// duplicateSignal is how soon after the first a second SIGTERM counts as
// the same signal delivered twice.
const duplicateSignal = 250 * time.Millisecond

// forceOnSecondSignal kills every agent and exits at a second SIGTERM or
// SIGINT. One that comes within 250ms of the first is the same signal
// delivered twice (to the process and to its group, as timeout(1) and
// shells do), not a second request.
func forceOnSecondSignal(b *broker.Broker, signals <-chan os.Signal, first time.Time, log zerolog.Logger, forceExit func()) {
	for sig := range signals {
		if sig == syscall.SIGHUP || time.Since(first) < duplicateSignal {
			continue
		}
		log.Warn().Str("signal", sig.String()).Msg("second signal: killing every agent and exiting now")
		b.Kill()
		forceExit()
		return
	}
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
