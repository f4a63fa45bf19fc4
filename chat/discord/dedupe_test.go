package discord

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"acpbroker/adapter"
	"acpbroker/internal/eventually"

	"github.com/bwmarrin/discordgo"
)

// memory is a thread.Memory in a map: what the state store keeps.
type memory struct {
	mu   sync.Mutex
	kept map[string]json.RawMessage
}

// memoryOf is a memory that knows thread, opened in channel by starter.
func memoryOf(thread, channel, starter string) *memory {
	rec, _ := json.Marshal(map[string]string{"parent": channel, "starter": starter})
	return &memory{kept: map[string]json.RawMessage{thread: rec}}
}

func (m *memory) PutThreadChat(thread string, record json.RawMessage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.kept[thread] = record
}

func (m *memory) ThreadChat(thread string) (json.RawMessage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.kept[thread]
	return r, ok
}

func (m *memory) ThreadChats() map[string]json.RawMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]json.RawMessage{}
	for k, v := range m.kept {
		out[k] = v
	}
	return out
}

// countingEngine records submissions: the prompts by thread.
type countingEngine struct {
	mu      sync.Mutex
	submits map[string]int
	prompts []*adapter.Prompt
	// asked, if set, is called with each prompt's sink as it is
	// submitted, before the turn ends; it may ask questions of it.
	asked func(adapter.Sink)
}

func (e *countingEngine) Submit(thread string, p *adapter.Prompt) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.submits[thread]++
	e.prompts = append(e.prompts, p)
	go func() {
		if e.asked != nil {
			e.asked(p.Sink)
		}
		p.Sink.Done(adapter.Outcome{StopReason: "end_turn", Text: "ok"})
	}()
	return nil
}
func (e *countingEngine) count(thread string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submits[thread]
}

func (e *countingEngine) submitted() []*adapter.Prompt {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*adapter.Prompt(nil), e.prompts...)
}

func (e *countingEngine) Cancel(string, error) bool            { return false }
func (e *countingEngine) Reset(string, error)                  {}
func (e *countingEngine) Status(string) adapter.ThreadStatus   { return adapter.ThreadStatus{} }
func (e *countingEngine) Options(string) adapter.ThreadOptions { return adapter.ThreadOptions{} }
func (e *countingEngine) SetOption(context.Context, string, string, string) (adapter.ThreadOptions, error) {
	return adapter.ThreadOptions{}, nil
}
func (e *countingEngine) SetMode(context.Context, string, string) (adapter.ThreadOptions, error) {
	return adapter.ThreadOptions{}, nil
}

// A message delivered twice (Discord redelivers after a resume) is one
// prompt; the bot's own messages and other bots' are none.
func TestOnMessage_DuplicatesAndBotsAreIgnored(t *testing.T) {
	eng := &countingEngine{submits: map[string]int{}}
	c, err := New(Config{Token: "t", APIURL: "http://127.0.0.1:1/api/v9/", Access: Access{AllowedChannels: []string{"chan"}},
		Memory: memoryOf("thread-1", "chan", "201")}, eng)
	if err != nil {
		t.Fatal(err)
	}
	me := "999"
	c.botID.Store(&me)
	c.srv.Accept(true)
	msg := func(id, author string, bot bool) *discordgo.MessageCreate {
		return &discordgo.MessageCreate{Message: &discordgo.Message{ID: id, ChannelID: "thread-1", GuildID: "g",
			Content: "hello", Author: &discordgo.User{ID: author, Bot: bot}}}
	}
	c.onMessage(nil, msg("m1", "201", false))
	c.onMessage(nil, msg("m1", "201", false)) // redelivered
	c.onMessage(nil, msg("m2", me, true))     // the bot's own
	c.onMessage(nil, msg("m3", "300", true))  // another bot
	c.onMessage(nil, msg("m4", "201", false))
	// The messages of a thread are submitted in order: once m5's prompt
	// is in, any wrong submission of the messages before it is too.
	c.onMessage(nil, msg("m5", "201", false))
	refs := func() []string {
		var out []string
		for _, p := range eng.submitted() {
			out = append(out, p.Ref[strings.LastIndex(p.Ref, "/")+1:])
		}
		return out
	}
	eventually.True(t, "m5 submitted", func() bool { return slices.Contains(refs(), "m5") })
	c.Close(0) // the sinks' Discord calls give up
	if got := refs(); !slices.Equal(got, []string{"m1", "m4", "m5"}) {
		t.Fatalf("prompts submitted for %v, want m1 once, m4 and m5", got)
	}
}
