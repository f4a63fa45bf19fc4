package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"sync"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// Engine is the turn engine as a Front without a chat drives it.
type Engine interface {
	Submit(thread string, p *adapter.Prompt) error
	Cancel(thread string, cause error) bool
}

// Headless is the Front of a broker that serves no chat: each prompt
// runs in a thread of the API's own ("api:…" in the engine), whose
// permission requests only the API answers. Threads are the ones its
// prompts opened; Known says which (the prompts recorded).
type Headless struct {
	engine Engine
	// Known reports whether thread is one its prompts opened.
	Known func(thread string) bool

	mu   sync.Mutex
	asks map[*acp.PermissionRequest]chan answer // open requests: where the answer goes
}

// answer is an option chosen through the API, by the client (a token's
// name).
type answer struct{ option, client string }

// NewHeadless is a Front of engine, whose threads are known by Known.
func NewHeadless(engine Engine, known func(thread string) bool) *Headless {
	return &Headless{engine: engine, Known: known, asks: map[*acp.PermissionRequest]chan answer{}}
}

var _ Front = (*Headless)(nil)

// HeadlessPlatform is the first part of a headless thread's id in the
// engine, the pool and the store: "api:t-…".
const HeadlessPlatform = "api"

// Start implements Front: a new thread, or one of its own.
func (h *Headless) Start(ctx context.Context, j Job) (Placed, error) {
	thread := j.Thread
	if thread == "" {
		thread = "t-" + randomHex(8)
	} else if !h.Known(thread) {
		return Placed{}, ErrNoThread
	}
	p := &adapter.Prompt{Title: excerpt(j.Text, 80), Author: "api:" + j.Client, Agent: j.Agent, Blocks: j.Blocks, Sink: j.Sink(headlessSink{h})}
	if err := h.engine.Submit(HeadlessPlatform+":"+thread, p); err != nil {
		return Placed{}, err
	}
	return Placed{Thread: thread}, nil
}

// Channel implements Front: a headless thread is in no channel.
func (h *Headless) Channel(ctx context.Context, thread string) (string, error) {
	if !h.Known(thread) {
		return "", ErrNoThread
	}
	return "", nil
}

// Answer implements Front.
func (h *Headless) Answer(req *acp.PermissionRequest, optionID, client string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.asks[req]
	if !ok {
		return ErrAnswered
	}
	if !slices.ContainsFunc(req.Options, func(o acp.PermissionOption) bool { return o.OptionID == optionID }) {
		return ErrNoOption
	}
	delete(h.asks, req)
	ch <- answer{option: optionID, client: client}
	return nil
}

// Cancel implements Front.
func (h *Headless) Cancel(thread string, cause error) bool {
	return h.engine.Cancel(HeadlessPlatform+":"+thread, cause)
}

// headlessSink is a headless thread's own Sink: nothing is shown, and
// its permission requests wait for the API's answer, which names the
// token that gave it ("api:" and its name, as a chat's answer through
// the API does).
type headlessSink struct{ h *Headless }

func (headlessSink) Status(adapter.Status) {}
func (headlessSink) Update(acp.Update)     {}
func (headlessSink) Notice(adapter.Notice) {}
func (headlessSink) Done(o adapter.Outcome) {
	o.Shown("")
}

func (s headlessSink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	h := s.h
	ch := make(chan answer, 1)
	h.mu.Lock()
	h.asks[req] = ch
	h.mu.Unlock()
	select {
	case a := <-ch:
		return adapter.Answer{Outcome: acp.PermissionOutcome{OptionID: a.option}, By: "api:" + a.client, ByName: a.client}
	case <-ctx.Done():
	}
	h.mu.Lock()
	_, open := h.asks[req]
	delete(h.asks, req)
	h.mu.Unlock()
	if !open { // answered as ctx ended: the turn moved on
		<-ch
	}
	return adapter.Answer{}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// excerpt collapses whitespace and cuts s to at most n runes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}
