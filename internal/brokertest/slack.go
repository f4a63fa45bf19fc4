package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"acpbroker/internal/fakeslack"
)

// Slack reads and drives a World's fake Slack as the broker's users see
// it: Channel is the allowed channel where the app is mentioned, and
// Alice, Bob and Carol are the World's users as Slack knows them. A
// thread is named by the ts of the message it hangs from, in Channel
// unless said. Its methods wait within a context and return errors
// rather than failing a test, so they are safe on any goroutine.
type Slack struct {
	Srv               *fakeslack.Server
	Channel           string
	Alice, Bob, Carol fakeslack.User
}

// SlackEmoji names a status reaction (Working, Done…) as Slack does.
var SlackEmoji = map[string]string{
	Queued:    "hourglass_flowing_sand",
	Working:   "gear",
	Done:      "white_check_mark",
	Failed:    "x",
	Cancelled: "black_square_for_stop",
	Refused:   "no_entry_sign",
	"🛑":       "octagonal_sign",
}

// newSlack makes a World's fake Slack: its users and the allowed
// channel.
func newSlack(w *World, opts fakeslack.Options) *Slack {
	srv := fakeslack.New(w.TB, opts)
	s := &Slack{Srv: srv}
	s.Alice = srv.AddUser(fakeslack.User{Name: "alice", RealName: "Alice Liddell", DisplayName: "Alice"})
	s.Bob = srv.AddUser(fakeslack.User{Name: "bob", RealName: "Bob Builder", DisplayName: "Bob"})
	s.Carol = srv.AddUser(fakeslack.User{Name: "carol", RealName: "Carol Singer", DisplayName: "Carol"})
	s.Channel = srv.AddChannel(fakeslack.Channel{Name: "agents"}).ID
	return s
}

// User is the World's user of that name ("alice", "bob", "carol") as
// Slack knows them.
func (s *Slack) User(name string) fakeslack.User {
	switch strings.ToLower(name) {
	case "alice":
		return s.Alice
	case "bob":
		return s.Bob
	case "carol":
		return s.Carol
	}
	return fakeslack.User{}
}

// Mention has u mention the app in the channel with text, waits until
// the app has taken the message (a status reaction on it, or a reply in
// its thread) and returns the message's ts: the thread's.
func (s *Slack) Mention(ctx context.Context, u fakeslack.User, text string) (string, error) {
	return s.MentionIn(ctx, s.Channel, u, text)
}

// MentionIn is Mention in another channel.
func (s *Slack) MentionIn(ctx context.Context, channel string, u fakeslack.User, text string) (string, error) {
	ts := s.Srv.PostMessage(channel, u.ID, s.Srv.Bot().Mention()+" "+text)
	if ts == "" {
		return "", fmt.Errorf("could not post %q in %s", text, channel)
	}
	err := s.Srv.WaitFor(ctx, func() bool {
		for _, r := range s.Srv.Reactions(channel, ts) {
			if slices.Contains(r.Users, s.Srv.Bot().UserID) {
				return true
			}
		}
		for _, m := range s.Srv.Thread(channel, ts) {
			if m.FromBot() {
				return true
			}
		}
		return false
	})
	if err != nil {
		return ts, fmt.Errorf("the app did not take %q: %w", text, err)
	}
	return ts, nil
}

// Post has u write text in the thread of ts in the channel, and returns
// the message's ts.
func (s *Slack) Post(thread string, u fakeslack.User, text string) string {
	return s.Srv.PostMessage(s.Channel, u.ID, text, fakeslack.InThread(thread))
}

// Command has u write a command to the app in the thread ("cancel",
// "model opus"), the mention first, and returns the message's ts.
func (s *Slack) Command(thread string, u fakeslack.User, text string) string {
	return s.Post(thread, u, s.Srv.Bot().Mention()+" "+text)
}

// SlackText is what a message of the app shows, from its blocks:
// sections as they are, small print (context blocks) as "-# " lines,
// actions left out; its text when it has no blocks. The three
// characters Slack's markup escapes (&, <, >) are shown as they are.
func SlackText(blocks []json.RawMessage, text string) string {
	return unescaper.Replace(slackMarkup(blocks, text))
}

// unescaper shows what Slack escapes as Slack's clients show it.
var unescaper = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

func slackMarkup(blocks []json.RawMessage, text string) string {
	if len(blocks) == 0 {
		return text
	}
	var lines []string
	for _, raw := range blocks {
		var b struct {
			Type string `json:"type"`
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
			Elements []struct {
				Text string `json:"text"`
			} `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		switch b.Type {
		case "section", "header":
			lines = append(lines, b.Text.Text)
		case "context":
			for _, e := range b.Elements {
				for l := range strings.SplitSeq(e.Text, "\n") {
					lines = append(lines, "-# "+l)
				}
			}
		}
	}
	return strings.Join(lines, "\n")
}

// Text is what a message shows (see SlackText).
func (s *Slack) Text(m fakeslack.Message) string { return SlackText(m.Blocks, m.Text) }

// SlackElement is an interactive element of a message or a view.
type SlackElement struct {
	Type     string `json:"type"`
	ActionID string `json:"action_id"`
	URL      string `json:"url"`
	Text     struct {
		Text string `json:"text"`
	} `json:"text"`
}

// SlackElements are the interactive elements of blocks' actions.
func SlackElements(blocks []json.RawMessage) []SlackElement {
	var out []SlackElement
	for _, raw := range blocks {
		var b struct {
			Type     string         `json:"type"`
			Elements []SlackElement `json:"elements"`
		}
		json.Unmarshal(raw, &b)
		if b.Type == "actions" {
			out = append(out, b.Elements...)
		}
	}
	return out
}

// SlackButton is the action id of the button labelled label in blocks.
func SlackButton(blocks []json.RawMessage, label string) (string, bool) {
	for _, e := range SlackElements(blocks) {
		if e.Type == "button" && e.Text.Text == label {
			return e.ActionID, true
		}
	}
	return "", false
}

// isPermission reports whether the app's message is a permission
// request.
func (s *Slack) isPermission(m fakeslack.Message) bool {
	return strings.HasPrefix(s.Text(m), PermissionPrefix)
}

// BotMessages are the app's messages in a thread that speak of turns:
// answers and notices (a written command's answer too), without
// permission requests and file shares.
func (s *Slack) BotMessages(thread string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range s.Srv.Thread(s.Channel, thread) {
		if m.FromBot() && m.TS != thread && !m.Deleted && !s.isPermission(m) && len(m.Files) == 0 {
			out = append(out, m)
		}
	}
	return out
}

// SlackAnswer is one turn's answer as a Slack thread shows it.
type SlackAnswer struct {
	Msgs   []fakeslack.Message
	Text   string // what the messages show, joined by newlines
	Footer string // the final line: how the turn ended
}

// Answers splits the app's messages in a thread into finished answers,
// told apart by their final footers; restart notices are skipped and an
// answer still streaming is left out.
func (s *Slack) Answers(thread string) []SlackAnswer {
	var out []SlackAnswer
	var cur []fakeslack.Message
	for _, m := range s.BotMessages(thread) {
		text := s.Text(m)
		if strings.HasPrefix(text, RestartNotice) {
			continue
		}
		cur = append(cur, m)
		if f := Footer(text); f != "" {
			a := SlackAnswer{Msgs: cur, Footer: f}
			parts := make([]string, len(cur))
			for i, m := range cur {
				parts[i] = s.Text(m)
			}
			a.Text = strings.Join(parts, "\n")
			out = append(out, a)
			cur = nil
		}
	}
	return out
}

// AwaitAnswers waits until the thread shows n finished answers and
// returns them.
func (s *Slack) AwaitAnswers(ctx context.Context, thread string, n int) ([]SlackAnswer, error) {
	var got []SlackAnswer
	err := s.Srv.WaitFor(ctx, func() bool {
		got = s.Answers(thread)
		return len(got) >= n
	})
	if err != nil {
		return got, fmt.Errorf("waiting for %d answer(s), %d shown: %w", n, len(got), err)
	}
	return got, nil
}

// AwaitBotText waits for a message of the app in the thread, after the
// first skip of BotMessages, showing text.
func (s *Slack) AwaitBotText(ctx context.Context, thread, text string, skip int) (fakeslack.Message, error) {
	var found fakeslack.Message
	err := s.Srv.WaitFor(ctx, func() bool {
		msgs := s.BotMessages(thread)
		for _, m := range msgs[min(skip, len(msgs)):] {
			if strings.Contains(s.Text(m), text) {
				found = m
				return true
			}
		}
		return false
	})
	if err != nil {
		return found, fmt.Errorf("waiting for a message of the app with %q: %w", text, err)
	}
	return found, nil
}

// SeenAt is when a message first showed text, from its revisions (zero
// if it never did).
func (s *Slack) SeenAt(channel, ts, text string) time.Time {
	for _, r := range s.Srv.Revisions(channel, ts) {
		if strings.Contains(SlackText(r.Blocks, r.Text), text) {
			return r.At
		}
	}
	return time.Time{}
}

// BotReactions lists the app's reactions on a message, as the status
// emoji they are (Slack's names of others).
func (s *Slack) BotReactions(channel, ts string) []string {
	var out []string
	for _, r := range s.Srv.Reactions(channel, ts) {
		if slices.Contains(r.Users, s.Srv.Bot().UserID) {
			name := r.Name
			for emoji, n := range SlackEmoji {
				if n == r.Name {
					name = emoji
				}
			}
			out = append(out, name)
		}
	}
	return out
}

// AwaitReaction waits for the app's status reaction emoji (Done…) on a
// message.
func (s *Slack) AwaitReaction(ctx context.Context, channel, ts, emoji string) error {
	name := SlackEmoji[emoji]
	if name == "" {
		name = emoji
	}
	err := s.Srv.WaitFor(ctx, func() bool { return s.Srv.HasReaction(channel, ts, s.Srv.Bot().UserID, name) })
	if err != nil {
		return fmt.Errorf("waiting for the app's %s on %s: %w", emoji, ts, err)
	}
	return nil
}

// PermissionRequest waits for a permission request with buttons in a
// thread, other than those in skip, and returns it.
func (s *Slack) PermissionRequest(ctx context.Context, thread string, skip ...string) (fakeslack.Message, error) {
	var found fakeslack.Message
	err := s.Srv.WaitFor(ctx, func() bool {
		for _, m := range s.Srv.Thread(s.Channel, thread) {
			if m.FromBot() && strings.HasPrefix(s.Text(m), PermissionPrefix+" *Permission needed*") && len(SlackElements(m.Blocks)) > 0 && !slices.Contains(skip, m.TS) {
				found = m
				return true
			}
		}
		return false
	})
	if err != nil {
		return found, fmt.Errorf("waiting for a permission request: %w", err)
	}
	return found, nil
}

// Whispered waits for a message shown to u alone, after the first skip
// of them, that shows want, and returns it.
func (s *Slack) Whispered(ctx context.Context, u fakeslack.User, want string, skip int) (fakeslack.Ephemeral, error) {
	var found fakeslack.Ephemeral
	err := s.Srv.WaitFor(ctx, func() bool {
		es := s.Srv.Ephemerals(u.ID)
		for _, e := range es[min(skip, len(es)):] {
			if strings.Contains(SlackText(e.Blocks, e.Text), want) {
				found = e
				return true
			}
		}
		return false
	})
	if err != nil {
		return found, fmt.Errorf("waiting for %s to be shown %q: %w", u.Name, want, err)
	}
	return found, nil
}

// AwaitAck waits for an envelope (a click, a command) to be
// acknowledged, and fails if it was not within Slack's 3 seconds.
func (s *Slack) AwaitAck(ctx context.Context, id string) (fakeslack.Envelope, error) {
	var env fakeslack.Envelope
	err := s.Srv.WaitFor(ctx, func() bool {
		var ok bool
		env, ok = s.Srv.Envelope(id)
		return ok && (env.Acked || env.Failed)
	})
	switch {
	case err != nil:
		return env, fmt.Errorf("envelope %s not settled: %w", id, err)
	case env.Failed || !env.Acked:
		return env, fmt.Errorf("envelope %s (%s) not acknowledged in time: %+v", id, env.Kind, env.Attempts)
	}
	return env, nil
}

// Status has u write "status" to the app in the thread and returns what
// u alone is shown in answer.
func (s *Slack) Status(ctx context.Context, thread string, u fakeslack.User) (string, error) {
	skip := len(s.Srv.Ephemerals(u.ID))
	s.Command(thread, u, "status")
	e, err := s.Whispered(ctx, u, "*Agent*", skip)
	return SlackText(e.Blocks, e.Text), err
}

// AgentPID asks for the thread's status and reads its agent's pid (0:
// none).
func (s *Slack) AgentPID(ctx context.Context, thread string, u fakeslack.User) (int, error) {
	st, err := s.Status(ctx, thread, u)
	if err != nil {
		return 0, err
	}
	_, rest, ok := strings.Cut(st, "*Agent*: pid ")
	if !ok {
		return 0, nil
	}
	num, _, _ := strings.Cut(rest, ",")
	pid, _ := strconv.Atoi(num)
	return pid, nil
}
