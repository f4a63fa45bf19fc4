// Command broker connects chat conversations to Agent Client Protocol
// agents: one agent process per thread, streamed answers, permission
// questions put to people.
//
// Usage:
//
//	broker [run] --config FILE     serve (the default command)
//	broker check-config --config FILE
//	broker host --config FILE      an agent host: runs the agents the
//	                               brokers of its cluster place on it
//	broker status [--json] --config FILE
//	                               what a running broker is doing (asked
//	                               on its socket in state.dir)
//	broker audit [--since 24h] [--thread ID] [--json] --config FILE
//	                               permission decisions kept in state.dir
//	                               (a running broker is asked on its
//	                               socket there)
//	broker audit --schedules [--schedule NAME] [--since 24h] [--json] --config FILE
//	                               the schedules' runs and their outcomes
//	broker version                 version, VCS revision and build time
//	broker help [COMMAND]          the commands, or how to call one
//
// broker alone, -h and --help list the commands; each command's -h and
// --help say how to call it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"acpbroker/broker"
	"acpbroker/cgroup"
	"acpbroker/config"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

func main() {
	// No process of the same user (an agent run without a sandbox, say)
	// may read the broker's memory or /proc/<pid>/environ, which hold the
	// chat platforms' tokens and the agents' keys.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "broker: could not make the process non-dumpable:", err)
		os.Exit(1)
	}
	os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdin, os.Stdout, os.Stderr))
}

// run is the program with its inputs explicit; it returns the exit status:
// 0 after a clean stop or for help, 1 when serving failed, 2 for bad
// usage or config.
func run(ctx context.Context, args, environ []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stdout)
		return 0
	}
	name := "run" // the default command: broker --config FILE
	if !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if isHelp(args[0]) {
		usage(stdout)
		return 0
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "broker: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	return c.run(ctx, invocation{cmd: c, args: args, environ: environ, stdin: stdin, stdout: stdout, stderr: stderr})
}

// serveCmd is `broker run` and `broker check-config`: the same flags, and
// the same checks of the configuration before serving.
func serveCmd(ctx context.Context, in invocation, checkOnly bool) int {
	fs := in.flags()
	configPath := fs.String("config", "", "TOML configuration `file` (without one, BROKER_* variables alone)")
	platform := fs.String("platform", "", "chat platforms: console, or discord, slack or both, separated by commas (overrides chat.platform)")
	if code, ok := in.parse(fs); !ok {
		return code
	}
	stdout, stderr, environ := in.stdout, in.stderr, in.environ
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
	if checkOnly {
		for _, w := range cfg.Warnings {
			fmt.Fprintln(stderr, "broker: warning:", w)
		}
		if !broker.RunsAgents(cfg) {
			fmt.Fprintln(stdout, "with [cluster] this broker runs no agent: each agent host checks its profiles' programs (command, mcp_servers), working directories, repositories and sandbox when `broker host` starts, and refuses to start without them")
		} else if cfg.Agent.Sandbox != "launcher" && cfg.Limited() {
			if _, err := cgroup.Probe(); err != nil {
				fmt.Fprintf(stderr, "broker: warning: memory_max and pids_max: %v; agents run without resource limits\n", err)
			}
		}
		fmt.Fprintln(stdout, "configuration is valid")
		return 0
	}

	logTo := stderr
	if f, err := conversationLog(cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "broker: log:", err)
		return 1
	} else if f != nil {
		defer f.Close()
		logTo = f
		fmt.Fprintf(stdout, "[the broker logs to %s]\n", f.Name())
	}
	log, level := newLogger(cfg.Log.Format, cfg.Log.Level, logTo)
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(signals)
	b, err := broker.Open(cfg, broker.Options{Environ: environ, Logger: log, SetLevel: level.set, Version: versionOf(), Stdin: in.stdin, Stdout: stdout})
	if err != nil {
		log.Error().Err(err).Msg("broker did not start")
		fmt.Fprintln(stderr, "broker:", err)
		return 1
	}
	serveErr := serve(ctx, b, signals, log, func() { os.Exit(1) }, terminalGone(cfg, in.stdin))
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
// SIGHUP reloads, or stops when hungUp reports the console's terminal
// gone; SIGTERM or SIGINT stops; a second one forces an immediate exit
// after killing every agent's process group.
func serve(ctx context.Context, b *broker.Broker, signals <-chan os.Signal, log zerolog.Logger, forceExit func(), hungUp func() bool) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- b.Serve(ctx) }()
	for {
		select {
		case err := <-served:
			return err
		case sig := <-signals:
			if sig == syscall.SIGHUP && !hungUp() {
				b.Reload()
				continue
			}
			if sig == syscall.SIGHUP {
				log.Info().Str("signal", sig.String()).Msg("the console's terminal hung up: stopping")
			} else {
				log.Info().Str("signal", sig.String()).Msg("stopping")
			}
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
