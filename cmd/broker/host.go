package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"acpbroker/broker"
	"acpbroker/config"
)

// hostCmd is `broker host`: an agent host, which runs the agents the
// brokers of its cluster place on it until SIGTERM or SIGINT.
func hostCmd(ctx context.Context, in invocation) int {
	fs := in.flags()
	configPath := fs.String("config", "", "TOML configuration `file` of the host (its profiles, sandbox, network and [cluster])")
	if code, ok := in.parse(fs); !ok {
		return code
	}
	cfg, err := config.Load(*configPath, in.environ)
	if err != nil {
		fmt.Fprintln(in.stderr, "broker:", err)
		return 2
	}
	if cfg.Cluster.URL == "" {
		fmt.Fprintln(in.stderr, "broker: config: cluster.url: an agent host needs the cluster to join")
		return 2
	}
	if err := broker.CheckHost(ctx, cfg, in.environ); err != nil {
		fmt.Fprintln(in.stderr, "broker: config:", err)
		return 2
	}
	log, _ := newLogger(cfg.Log.Format, cfg.Log.Level, in.stderr)
	for _, w := range cfg.Warnings {
		log.Warn().Msg(w)
	}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	h, err := broker.OpenHost(ctx, cfg, broker.Options{Environ: in.environ, Logger: log, Version: versionOf()})
	if err != nil {
		log.Error().Err(err).Msg("agent host did not start")
		fmt.Fprintln(in.stderr, "broker:", err)
		return 1
	}
	ctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx) }()
	select {
	case err = <-served:
	case sig := <-signals:
		log.Info().Str("signal", sig.String()).Msg("stopping")
		stop()
		go func() {
			for range signals {
				log.Warn().Msg("second signal: killing every agent and exiting now")
				h.Kill()
				os.Exit(1)
			}
		}()
		err = <-served
	}
	stop()
	grace := cfg.Shutdown.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), grace)
	h.Stop(stopCtx)
	cancel()
	if err != nil {
		fmt.Fprintln(in.stderr, "broker:", err)
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}
