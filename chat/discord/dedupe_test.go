package discord

import (
	"context"
	"sync"
	"testing"
	"time"

	"acpbroker/adapter"

	"github.com/bwmarrin/discordgo"
)

// countingEngine records submissions.
type countingEngine struct {
	mu      sync.Mutex
	submits map[string]int
}

func (e *countingEngine) Submit(thread string, p *adapter.Prompt) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.submits[thread]++
	go p.Sink.Done(adapter.Outcome{StopReason: "end_turn", Text: "ok"})
	return nil
}
func (e *countingEngine) count(thread string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submits[thread]
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
	c, err := New(Config{Token: "t", APIURL: "http://127.0.0.1:1/api/v9/"}, eng)
	if err != nil {
		t.Fatal(err)
	}
	me := "999"
	c.botID.Store(&me)
	c.accepting = true
	c.access = Access{AllowedChannels: []string{"chan"}}
	c.convs["thread-1"] = &conversation{thread: "thread-1", parent: "chan", starter: "201"}
	msg := func(id, author string, bot bool) *discordgo.MessageCreate {
		return &discordgo.MessageCreate{Message: &discordgo.Message{ID: id, ChannelID: "thread-1", GuildID: "g",
			Content: "hello", Author: &discordgo.User{ID: author, Bot: bot}}}
	}
	c.onMessage(nil, msg("m1", "201", false))
	c.onMessage(nil, msg("m1", "201", false)) // redelivered
	c.onMessage(nil, msg("m2", me, true))     // the bot's own
	c.onMessage(nil, msg("m3", "300", true))  // another bot
	c.onMessage(nil, msg("m4", "201", false))
	deadline := time.Now().Add(5 * time.Second)
	for eng.count("thread-1") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for a wrong third submission
	c.cancel()                         // the sinks' Discord calls give up
	c.wg.Wait()
	eng.mu.Lock()
	defer eng.mu.Unlock()
	if n := eng.submits["thread-1"]; n != 2 {
		t.Fatalf("%d prompts submitted, want 2 (m1 once, and m4)", n)
	}
}
