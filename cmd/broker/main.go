// Command broker connects chat conversations to Agent Client Protocol
// agents: one agent process per thread, streamed answers, permission
// questions put to people.
//
// Usage:
//
//	broker [run] --config FILE     serve (the default command)
//	broker check-config --config FILE
//	broker version
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/chat/console"
	"acpbroker/pool"
	"acpbroker/store"

	"github.com/rs/zerolog"
)

var version = "dev"

func main() {
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
		fmt.Fprintf(stdout, "acp-broker %s\n", version)
		return 0
	case "run", "check-config":
	default:
		fmt.Fprintf(stderr, "broker: unknown command %q (want run, check-config or version)\n", cmd)
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
	lookup := envLookup(environ)
	agentEnv, err := pool.BuildEnv(lookup, cfg.Agent.Env)
	if err != nil {
		fmt.Fprintln(stderr, "broker: config:", err)
		return 2
	}
	if cmd == "check-config" {
		fmt.Fprintln(stdout, "configuration is valid")
		return 0
	}
	log := newLogger(cfg, stderr)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, agentEnv, log, stdin, stdout); err != nil {
		log.Error().Err(err).Msg("broker stopped")
		fmt.Fprintln(stderr, "broker:", err)
		return 1
	}
	return 0
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

func newLogger(cfg *Config, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(cfg.Log.Level)
	if err != nil || cfg.Log.Level == "" {
		level = zerolog.InfoLevel
	}
	if cfg.Log.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// serve wires pool, engine and platform together and runs until ctx ends or
// the platform returns; then it shuts down in order: turns, then agents.
func serve(ctx context.Context, cfg *Config, agentEnv []string, log zerolog.Logger, stdin io.Reader, stdout io.Writer) error {
	cwd, err := filepath.Abs(cfg.Agent.Cwd)
	if err != nil {
		return fmt.Errorf("config: agent.cwd: %w", err)
	}
	st, err := store.Open(store.Options{Dir: cfg.State.Dir, Retention: cfg.State.Retention, Logger: log})
	if err != nil {
		return err
	}
	defer st.Close()
	interrupted, err := st.Recover()
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if left, err := st.Leftovers(); err != nil {
		log.Warn().Err(err).Msg("could not read the agents an earlier broker left")
	} else if len(left) > 0 {
		list := make([]pool.Leftover, len(left))
		for i, a := range left {
			list[i] = pool.Leftover{PID: a.PID, StartTicks: a.StartTicks}
		}
		pool.KillLeftovers(list, log)
	}
	p := pool.New(pool.Config{
		Command:      cfg.Agent.Command,
		Args:         cfg.Agent.Args,
		Env:          agentEnv,
		WorkDir:      cwd,
		PerThreadDir: cfg.Agent.PerThreadDir,
		MaxSessions:  cfg.Pool.MaxSessions,
		IdleTimeout:  cfg.Pool.IdleTimeout,
		StartTimeout: cfg.Agent.StartTimeout,
		ExitGrace:    cfg.Agent.ExitGrace,
		Sessions:     st,
		Registry:     st,
		Conn: acp.Options{
			MaxLineBytes: cfg.Agent.MaxLineBytes,
			UpdateQueue:  cfg.Turn.UpdateQueue,
			ClientInfo:   acp.Implementation{Name: "acp-broker", Version: version},
			AuthMethod:   cfg.Agent.AuthMethod,
		},
		Logger: log,
	})
	defer p.Close()
	engine := adapter.New(p, adapter.Config{
		TurnTimeout:       cfg.Turn.Timeout,
		LivenessInterval:  cfg.Turn.LivenessInterval,
		CancelGrace:       cfg.Turn.CancelGrace,
		SlotWait:          cfg.Pool.SlotWait,
		QueueSize:         cfg.Turn.QueueSize,
		PermissionMode:    cfg.Turn.PermissionMode,
		PermissionTimeout: cfg.Turn.PermissionTimeout,
		ToolTimeout:       cfg.Turn.ToolTimeout,
		WatchdogInterval:  cfg.Watchdog.Interval,
		Journal:           st,
		Logger:            log,
	})
	defer engine.Close() // for the early returns; Close is idempotent

	var platform chat.Platform
	switch cfg.Chat.Platform {
	case "console":
		platform = &console.Console{Engine: engine, In: stdin, Out: stdout, ShowThoughts: cfg.Discord.ShowThoughts}
	default:
		return fmt.Errorf("chat.platform %s is not available in this build", cfg.Chat.Platform)
	}
	platform.Report(interruptions(interrupted), func(id uint64) {
		if err := st.MarkReported(id); err != nil {
			log.Warn().Err(err).Uint64("turn", id).Msg("interrupted turn not marked as reported")
		}
	})
	log.Info().Str("platform", cfg.Chat.Platform).Str("agent", cfg.Agent.Command).Int("interrupted", len(interrupted)).Msg("broker started")
	runErr := platform.Run(ctx)
	// Stop in order: no new prompts (Run has returned), end every turn,
	// let the platform show their last words, then stop the agents.
	log.Info().Msg("shutting down")
	deadline := time.Now().Add(cfg.Shutdown.Grace)
	engine.Close()
	if err := platform.Close(time.Until(deadline)); err != nil {
		log.Warn().Err(err).Msg("chat connection did not close cleanly")
	}
	return runErr
}

func interruptions(turns []store.Turn) []chat.Interruption {
	out := make([]chat.Interruption, len(turns))
	for i, t := range turns {
		out[i] = chat.Interruption{ID: t.ID, Thread: t.Thread, Ref: t.Ref, Title: t.Title, Queued: t.Queued}
	}
	return out
}
