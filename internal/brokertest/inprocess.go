package brokertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"acpbroker/broker"
	"acpbroker/config"

	"github.com/rs/zerolog"
)

// InProcess is a broker run in the test's own process, from a World's
// configuration and wired as the broker binary wires one (package
// broker): for tests that reach into its parts, or that give it a
// platform of their own. Its Broker is the running broker; Log is its
// log, as a Broker's is.
type InProcess struct {
	*broker.Broker
	Log    *Log
	w      *World
	served chan error
	once   sync.Once

	// slackConns are the Socket Mode connections the fake Slack had
	// accepted before the broker opened.
	slackConns int

	mu     sync.Mutex
	cancel context.CancelFunc // nil until Serve
}

// Open runs a broker in the test's process with the World's
// configuration and opts, and waits, within ctx, until every one of its
// platforms takes messages (Discord: its slash commands registered too).
// Unless opts says, its environment is the World's (PATH, HOME and
// World.Env); its log, at the configured level, goes to Log. It skips
// the checks of the machine a start does (broker.Check). The test's
// cleanup stops it and logs the end of its log if the test failed; on
// error it is stopped.
func (w *World) Open(ctx context.Context, opts broker.Options) (*InProcess, error) {
	cfg, err := w.Load(opts.Environ)
	if err != nil {
		return nil, err
	}
	p, err := w.OpenConfig(cfg, opts)
	if err != nil {
		return nil, err
	}
	return p, p.Serve(ctx)
}

// Load writes the World's configuration and reads it as a broker does,
// with environ (nil: the World's environment).
func (w *World) Load(environ []string) (*config.Config, error) {
	path, err := w.WriteConfig()
	if err != nil {
		return nil, err
	}
	if environ == nil {
		environ = w.environ()
	}
	return config.Load(path, environ)
}

// OpenConfig opens a broker as Open does, with cfg (the World's as Load
// read it, changed by the test: a platform of its own in
// cfg.Chat.Platforms, say, made by one of opts.Platforms), but does not
// serve it: Serve does, once the test has what it needs of the broker.
func (w *World) OpenConfig(cfg *config.Config, opts broker.Options) (*InProcess, error) {
	if opts.Environ == nil {
		opts.Environ = w.environ()
	}
	w.mu.Lock()
	w.starts++
	n := w.starts
	w.mu.Unlock()
	log, err := newLog(filepath.Join(w.Dir, fmt.Sprintf("broker-%d.log", n)), 256<<10)
	if err != nil {
		return nil, err
	}
	level, err := zerolog.ParseLevel(cfg.Log.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	opts.Logger = zerolog.New(log).Level(level).With().Timestamp().Logger()
	b, err := broker.Open(cfg, opts)
	if err != nil {
		log.close()
		return nil, err
	}
	p := &InProcess{Broker: b, Log: log, w: w, served: make(chan error, 1), slackConns: w.slackConnections()}
	w.TB.Cleanup(func() {
		p.Stop(30 * time.Second)
		if w.TB.Failed() && w.logTail > 0 {
			w.TB.Logf("broker log (in the test's process, %s):\n%s", log.Path(), log.Tail(w.logTail))
		}
	})
	return p, nil
}

// Serve has the broker serve, in the background until Stop, and waits,
// within ctx, until every one of its platforms takes messages (Discord:
// its slash commands registered too). On error the broker is stopped.
// Call it once.
func (p *InProcess) Serve(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.Background())
	p.mu.Lock()
	p.cancel = cancel
	p.mu.Unlock()
	go func() { p.served <- p.Broker.Serve(sctx) }()
	if err := p.awaitReady(ctx); err != nil {
		p.Stop(10 * time.Second)
		return err
	}
	return nil
}

// environ is the environment the World's brokers run with.
func (w *World) environ() []string {
	return append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir}, w.Env...)
}

// awaitReady waits for every platform to take messages and, with
// Discord, for its slash commands; with Slack, for the fake to reach
// it.
func (p *InProcess) awaitReady(ctx context.Context) error {
	select {
	case <-p.Ready():
	case err := <-p.served:
		p.served <- err
		return fmt.Errorf("the broker stopped before it was ready: %v", err)
	case <-ctx.Done():
		return fmt.Errorf("the broker did not get ready: %w", context.Cause(ctx))
	}
	if p.Platform("discord") != nil {
		err := p.w.Srv.WaitFor(ctx, func() bool { return len(p.w.Srv.Commands()) >= 5 })
		if err != nil {
			return fmt.Errorf("the broker did not register its commands: %w", err)
		}
	}
	if p.Platform("slack") != nil && p.w.Slack != nil {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		return p.w.slackReady(p.slackConns, func(what string) error {
			select {
			case <-ctx.Done():
				return fmt.Errorf("the broker did not get ready (%s): %w", what, context.Cause(ctx))
			case <-tick.C:
				return nil
			}
		})
	}
	return nil
}

// Stop stops the broker as the binary does at SIGTERM: it serves no
// more, then shuts down within grace. It returns what serving returned;
// calling it again does nothing and returns nil.
func (p *InProcess) Stop(grace time.Duration) error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		cancel := p.cancel
		p.mu.Unlock()
		if cancel != nil {
			cancel()
			err = <-p.served
		}
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		p.Broker.Stop(ctx)
		p.Log.close()
	})
	return err
}
