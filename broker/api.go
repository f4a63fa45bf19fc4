package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/api"
	"acpbroker/chat/thread"
	"acpbroker/config"
)

// chatFront is a chat platform's threads as the API starts prompts in
// them: shown there like any other, against a message of the bot's that
// names the API's client.
type chatFront struct {
	srv      *thread.Server
	engine   *adapter.Engine
	platform string
}

var _ api.Front = chatFront{}

func (f chatFront) Start(ctx context.Context, j api.Job) (api.Placed, error) {
	started, err := f.srv.Start(ctx, thread.Request{Channel: j.Channel, Thread: j.Thread, By: "🤖 **" + j.Client + "** (through the API)",
		Text: j.Text, Blocks: j.Blocks, Agent: j.Agent, Sink: j.Sink})
	switch {
	case errors.Is(err, thread.ErrNotServed):
		return api.Placed{}, fmt.Errorf("%w: %w", api.ErrNotServed, err)
	case errors.Is(err, thread.ErrNoThread):
		return api.Placed{}, fmt.Errorf("%w: %w", api.ErrNoThread, err)
	case errors.Is(err, thread.ErrNotServing):
		return api.Placed{}, fmt.Errorf("%w: %w", api.ErrOffline, err)
	case err != nil && started.Thread == "":
		return api.Placed{}, err
	case err != nil:
		return api.Placed{}, err // the engine refused: the thread says so
	}
	return api.Placed{Thread: started.Thread, Channel: started.Channel, Link: started.Link}, nil
}

func (f chatFront) Channel(ctx context.Context, th string) (string, error) {
	ch, err := f.srv.ThreadChannel(th)
	if err != nil {
		return "", fmt.Errorf("%w: %w", api.ErrNoThread, err)
	}
	return ch, nil
}

func (f chatFront) Answer(req *acp.PermissionRequest, optionID, client string) error {
	err := f.srv.AnswerPermission(req, optionID, thread.User{ID: "api:" + client, Name: client, Handle: "api:" + client}, "the API")
	switch {
	case errors.Is(err, thread.ErrNotOpen):
		return api.ErrAnswered
	case errors.Is(err, thread.ErrNoOption):
		return api.ErrNoOption
	}
	return err
}

func (f chatFront) Cancel(th string, cause error) bool {
	return f.engine.Cancel(ThreadID(f.platform, th), cause)
}

// apiConfig is the API's configuration from the broker's: its fronts
// are the chat platforms that take prompts from the broker, or without
// any, headless.
func (b *Broker) apiConfig(cfg *config.Config) api.Config {
	fronts := map[string]api.Front{}
	for _, p := range b.chats {
		if p.Threads != nil {
			fronts[p.name] = chatFront{srv: p.Threads, engine: b.engine, platform: p.name}
		}
	}
	if len(fronts) == 0 {
		fronts[api.HeadlessPlatform] = b.headless
	}
	def := ""
	if len(fronts) == 1 {
		for name := range fronts {
			def = name
		}
	}
	return api.Config{
		Tokens:         cfg.API.Tokens,
		RateLimit:      cfg.API.RateLimit,
		MaxBodyBytes:   cfg.API.MaxBodyBytes,
		MaxConnections: cfg.API.MaxConnections,
		MaxStreams:     cfg.API.MaxStreams,
		MaxTextBytes:   cfg.Discord.MaxTextBytes,
		Fronts:         fronts,
		Default:        def,
		Profile:        func(name string) bool { return b.pool.Profile(name) != nil && b.pool.Profile(name).Name == name },
		Store:          b.store,
		Logger:         b.log.With().Str("part", "api").Logger(),
	}
}

// apiOwnThread reports whether thread is one of the API's own (a prompt
// of a broker without a chat): its agent is stopped after each turn, so
// that one-shot prompts from programs never push a chat user's idle
// agent out of the pool; the thread's next prompt resumes its session.
func apiOwnThread(thread string) bool { return strings.HasPrefix(thread, api.HeadlessPlatform+":") }

// openAPI serves the API when api.listen is set.
func (b *Broker) openAPI() error {
	b.headless = api.NewHeadless(b.engine, func(string) bool { return false })
	if b.cfg.API.Listen == "" {
		return nil
	}
	var err error
	b.api, err = api.Listen(b.cfg.API.Listen, b.apiConfig(b.cfg))
	if err != nil {
		return err
	}
	b.headless.Known = b.api.HeadlessThread
	b.log.Info().Str("addr", b.api.Addr()).Int("tokens", len(b.cfg.API.Tokens)).Msg("serving the HTTP API")
	return nil
}

// APIAddr is the address the HTTP API is served on ("" without
// api.listen).
func (b *Broker) APIAddr() string {
	if b.api == nil {
		return ""
	}
	return b.api.Addr()
}
