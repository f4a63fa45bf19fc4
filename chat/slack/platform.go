package slack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// platform is the Client as package thread drives it: its methods make
// one Web API call each (or the few that are one step: a message and its
// files) and tell Slack's errors in thread's terms. A conversation's
// thread is a Slack thread, named ThreadPrefix + channel + "/" + the ts
// of the message it hangs from; a channel is named by its id. A
// message's Ref is channel/ts, or channel/ts/thread_ts for a reply.
type platform Client

var (
	_ thread.Platform  = (*platform)(nil)
	_ thread.Whisperer = (*platform)(nil)
	_ thread.Referrer  = (*platform)(nil)
)

func (p *platform) client() *Client { return (*Client)(p) }

// Status reactions, by mark, as Slack names the emoji.
var emoji = map[thread.Mark]string{
	thread.MarkQueued:    "hourglass_flowing_sand",
	thread.MarkWorking:   "gear",
	thread.MarkDone:      "white_check_mark",
	thread.MarkFailed:    "x",
	thread.MarkCancelled: "black_square_for_stop",
	thread.MarkRefused:   "no_entry_sign",
	thread.MarkLost:      "warning",
	thread.MarkStop:      emojiStop,
}

// emojiStop is a user's reaction that cancels the turn: 🛑.
const emojiStop = "octagonal_sign"

// threadKey names the conversation hanging from message ts of channel.
func (c *Client) threadKey(channel, ts string) string {
	return c.cfg.ThreadPrefix + channel + "/" + ts
}

// parseThread reads a thread's name back into its channel and the ts of
// the message it hangs from.
func (c *Client) parseThread(where string) (channel, ts string, ok bool) {
	rest, ok := strings.CutPrefix(where, c.cfg.ThreadPrefix)
	if !ok {
		return "", "", false
	}
	channel, ts, ok = strings.Cut(rest, "/")
	if !ok || !validID(channel) || !validTS(ts) {
		return "", "", false
	}
	return channel, ts, true
}

// place reads where (a thread, or a channel) into the channel and the
// thread's ts ("" for a channel).
func (c *Client) place(where string) (channel, threadTS string) {
	if ch, ts, ok := c.parseThread(where); ok {
		return ch, ts
	}
	return where, ""
}

func validID(s string) bool {
	return s != "" && strings.TrimFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }) == ""
}

func validTS(s string) bool {
	sec, frac, ok := strings.Cut(s, ".")
	_, err1 := strconv.ParseUint(sec, 10, 64)
	_, err2 := strconv.ParseUint(frac, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// tsTime is when a message of ts was posted.
func tsTime(ts string) time.Time {
	sec, frac, _ := strings.Cut(ts, ".")
	s, _ := strconv.ParseInt(sec, 10, 64)
	frac = (frac + "000000")[:6]
	us, _ := strconv.ParseInt(frac, 10, 64)
	return time.Unix(s, us*1000)
}

// tsAfter reports whether ts a is later than b.
func tsAfter(a, b string) bool { return tsTime(a).After(tsTime(b)) }

// ref names a message for the journal.
func ref(channel, ts, threadTS string) string {
	if threadTS == "" || threadTS == ts {
		return channel + "/" + ts
	}
	return channel + "/" + ts + "/" + threadTS
}

// options are a view as the Web API takes it: the text as blocks (and
// the text for notifications), unfurls off for NoPreview, and, for a
// message of a conversation thread, the metadata that tells it (and
// whether it shows a turn's outcome) to a later start. extra goes in the
// metadata's payload too.
func (c *Client) options(where string, v thread.View, extra map[string]any) []slackapi.MsgOption {
	set, fallback := blocks(c.unping(v.Text), v.Actions, where)
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(fallback, false), slackapi.MsgOptionBlocks(set...)}
	if v.NoPreview {
		opts = append(opts, slackapi.MsgOptionDisableLinkUnfurl(), slackapi.MsgOptionDisableMediaUnfurl())
	}
	payload := map[string]any{}
	if _, _, ok := c.parseThread(where); ok {
		payload[metaThread] = true
		payload[metaOutcome] = v.Outcome
	}
	for k, x := range extra {
		payload[k] = x
	}
	if len(payload) > 0 {
		opts = append(opts, slackapi.MsgOptionMetadata(slackapi.SlackMetadata{EventType: metaEvent, EventPayload: payload}))
	}
	return opts
}

// errParentGone: the thread's first message was deleted, and Slack
// posted the reply at the top level of the channel instead.
var errParentGone = fmt.Errorf("%w: the thread's first message was deleted", thread.ErrNotFound)

// Post implements thread.Platform: a reply in the thread (or, in a
// channel, to ReplyTo's thread, else at the top level), then its files
// into the same thread. A reply Slack put at the top level because the
// thread's first message is gone is taken back, and the thread is told
// not found, from then on without asking Slack, so that no other stray
// flashes in the channel. A message whose files could not follow is
// taken back too, so that trying again posts both.
func (p *platform) Post(ctx context.Context, where string, v thread.View) (string, error) {
	return p.client().post(ctx, where, v, nil)
}

func (c *Client) post(ctx context.Context, where string, v thread.View, extra map[string]any) (string, error) {
	channel, threadTS := c.place(where)
	if threadTS == "" {
		threadTS = v.ReplyTo
	}
	c.mu.Lock()
	_, gone := c.gone.Get(channel + "/" + threadTS)
	c.mu.Unlock()
	if threadTS != "" && gone {
		return "", errParentGone
	}
	opts := c.options(where, v, extra)
	if threadTS != "" {
		opts = append(opts, slackapi.MsgOptionTS(threadTS))
	}
	var ts string
	var msg slackapi.Message
	err := c.call(ctx, "chat.postMessage", channel, v.Outcome, func(ctx context.Context) (err error) {
		_, ts, msg, err = c.api.PostMessageWithResponseContext(ctx, channel, opts...)
		return err
	})
	if err != nil {
		return "", err
	}
	if threadTS != "" && msg.ThreadTimestamp == "" && msg.Timestamp != "" {
		c.remove(channel, ts)
		c.mu.Lock()
		c.gone.Put(channel+"/"+threadTS, struct{}{})
		c.mu.Unlock()
		return "", errParentGone
	}
	if _, _, ok := c.parseThread(where); ok {
		c.noteParent(channel, ts, where)
	}
	if len(v.Files) > 0 {
		if err := c.upload(ctx, channel, threadTS, v.Files); err != nil {
			c.remove(channel, ts)
			return "", err
		}
	}
	return ts, nil
}

// remove deletes a message the bot just posted, on a goroutine: it is
// not what the caller wanted.
func (c *Client) remove(channel, ts string) {
	c.spawn(func() {
		err := c.do(c.ctx, "chat.delete", channel, 5, func(ctx context.Context) error {
			_, _, err := c.api.DeleteMessageContext(ctx, channel, ts)
			return err
		})
		if err != nil {
			c.log.Warn().Err(err).Str("channel", channel).Str("ts", ts).Msg("a stray message could not be deleted")
		}
	})
}

// Edit implements thread.Platform: chat.update, then v's files into the
// thread.
func (p *platform) Edit(ctx context.Context, where, id string, v thread.View) error {
	c := p.client()
	channel, threadTS := c.place(where)
	opts := c.options(where, v, nil)
	err := c.call(ctx, "chat.update", "", v.Outcome, func(ctx context.Context) error {
		_, _, _, err := c.api.UpdateMessageContext(ctx, channel, id, opts...)
		return err
	})
	if err != nil || len(v.Files) == 0 {
		return err
	}
	if threadTS == "" {
		threadTS = id
	}
	return c.upload(ctx, channel, threadTS, v.Files)
}

// Delete implements thread.Platform.
func (p *platform) Delete(ctx context.Context, where, id string) error {
	c := p.client()
	channel, _ := c.place(where)
	return c.call(ctx, "chat.delete", "", false, func(ctx context.Context) error {
		_, _, err := c.api.DeleteMessageContext(ctx, channel, id)
		return err
	})
}

// Mark implements thread.Platform: a reaction. Reactions are limited
// for the whole workspace (reactions.remove to about 20 a minute): a
// mark waits out the limit within ctx rather than be refused.
func (p *platform) Mark(ctx context.Context, where, id string, m thread.Mark, on bool) error {
	c := p.client()
	name, ok := emoji[m]
	if !ok {
		return fmt.Errorf("no reaction for the mark %v", m)
	}
	channel, _ := c.place(where)
	item := slackapi.NewRefToMessage(channel, id)
	method := "reactions.add"
	if !on {
		method = "reactions.remove"
	}
	var err error
	for failed := 0; ; {
		err = c.call(ctx, method, "", false, func(ctx context.Context) error {
			if on {
				return c.api.AddReactionContext(ctx, name, item)
			}
			return c.api.RemoveReactionContext(ctx, name, item)
		})
		wait, limited := retryAfter(err)
		if !limited {
			// A reaction is the same made twice: one Slack failed to
			// make (a 5xx) is tried again, a few times.
			if !serverError(err) || failed >= markServerTries-1 {
				break
			}
			failed++
			wait = time.Duration(failed) * markServerWait
		}
		if !c.sleep(ctx, wait) {
			return cmp.Or(context.Cause(ctx), context.Cause(c.ctx))
		}
	}
	switch code := slackError(err); {
	case on && code == "already_reacted", !on && code == "no_reaction":
		return nil
	}
	return err
}

// A status reaction Slack failed to make (a 5xx) is tried markServerTries
// times in all, markServerWait more apart each time.
const (
	markServerTries = 4
	markServerWait  = 250 * time.Millisecond
)

// serverError reports whether err is Slack's server failing (a 5xx).
func serverError(err error) bool {
	se, ok := errors.AsType[slackapi.StatusCodeError](err)
	return ok && se.Code >= 500
}

// Marks implements thread.Platform: the bot's reactions that are marks.
func (p *platform) Marks(ctx context.Context, where, id string) ([]thread.Mark, error) {
	c := p.client()
	channel, _ := c.place(where)
	var item slackapi.ReactedItem
	err := c.call(ctx, "reactions.get", "", false, func(ctx context.Context) (err error) {
		item, err = c.api.GetReactionsContext(ctx, slackapi.NewRefToMessage(channel, id), slackapi.GetReactionsParameters{Full: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	me := c.me.Load().userID
	var out []thread.Mark
	for _, r := range item.Reactions {
		if !slices.Contains(r.Users, me) {
			continue
		}
		for mark, name := range emoji {
			if name == r.Name {
				out = append(out, mark)
			}
		}
	}
	return out, nil
}

// OpenThread implements thread.Platform: a Slack thread needs no call;
// it is the message's, and its name is not Slack's to keep.
func (p *platform) OpenThread(_ context.Context, channel, id, _ string) (string, error) {
	c := p.client()
	key := c.threadKey(channel, id)
	c.mu.Lock()
	c.verdicts.Put(key, true)
	c.mu.Unlock()
	return key, nil
}

// errNotOurs: the thread is not a conversation of the app's.
var errNotOurs = fmt.Errorf("%w: not a thread of the app's", thread.ErrNotFound)

// Thread implements thread.Platform: a thread is the app's when the
// broker recorded it (Memory), opened it in this process, or, asked
// once and remembered, the app has posted a conversation's message in
// it (its metadata says so).
func (p *platform) Thread(ctx context.Context, where string) (string, error) {
	c := p.client()
	channel, ts, ok := c.parseThread(where)
	if !ok {
		return "", errNotOurs
	}
	if m := c.cfg.Memory; m != nil {
		if _, ok := m.ThreadChat(where); ok {
			return channel, nil
		}
	}
	ours, err := c.lookUp(ctx, where, channel, ts)
	if err != nil {
		return "", err
	}
	if !ours {
		return "", errNotOurs
	}
	return channel, nil
}

// lookup is a look at a thread under way, which the others who ask
// about the thread meanwhile wait for.
type lookup struct {
	done chan struct{}
	ours bool
	err  error
}

// lookUp reads the thread to tell whether the app posted a
// conversation's message there, and remembers what it found (an error
// that may pass is not remembered). One call is made for a thread at a
// time: the others asking meanwhile get its answer.
func (c *Client) lookUp(ctx context.Context, where, channel, ts string) (bool, error) {
	c.mu.Lock()
	if ours, known := c.verdicts.Get(where); known {
		c.mu.Unlock()
		return ours, nil
	}
	l := c.lookups[where]
	if l == nil {
		l = &lookup{done: make(chan struct{})}
		c.lookups[where] = l
		c.mu.Unlock()
		l.ours, l.err = c.readThread(ctx, channel, ts)
		c.mu.Lock()
		delete(c.lookups, where)
		if l.err == nil {
			c.verdicts.Put(where, l.ours)
		}
		c.mu.Unlock()
		close(l.done)
		return l.ours, l.err
	}
	c.mu.Unlock()
	select {
	case <-l.done:
		return l.ours, l.err
	case <-ctx.Done():
		return false, context.Cause(ctx)
	}
}

// readThread reads a thread: is one of its messages the app's, marked as
// a conversation's?
func (c *Client) readThread(ctx context.Context, channel, ts string) (bool, error) {
	msgs, err := c.replies(ctx, channel, ts, "", 100)
	switch {
	case errors.Is(err, thread.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	me := c.me.Load()
	return slices.ContainsFunc(msgs, func(m slackapi.Message) bool {
		return m.BotID == me.botID && m.Metadata.EventType == metaEvent && m.Metadata.EventPayload[metaThread] == true
	}), nil
}

// replies reads up to limit messages of a thread, its first message
// first, those after after alone when it is set.
func (c *Client) replies(ctx context.Context, channel, ts, after string, limit int) ([]slackapi.Message, error) {
	var msgs []slackapi.Message
	err := c.call(ctx, "conversations.replies", "", false, func(ctx context.Context) (err error) {
		msgs, _, _, err = c.api.GetConversationRepliesContext(ctx, &slackapi.GetConversationRepliesParameters{
			ChannelID: channel, Timestamp: ts, Oldest: after, Limit: limit, IncludeAllMetadata: true,
		})
		return err
	})
	return msgs, err
}

// errNoStarter: the thread's first message is gone, or names nobody.
var errNoStarter = fmt.Errorf("%w: the thread's first message is gone", thread.ErrNotFound)

// Starter implements thread.Platform: the author of the thread's first
// message; for one the app posted (a /acp new), who gave the command.
func (p *platform) Starter(ctx context.Context, _, where string) (string, error) {
	c := p.client()
	channel, ts, ok := c.parseThread(where)
	if !ok {
		return "", errNoStarter
	}
	msgs, err := c.replies(ctx, channel, ts, "", 1)
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 || msgs[0].Timestamp != ts || msgs[0].SubType == "tombstone" {
		return "", errNoStarter
	}
	first := msgs[0]
	if first.BotID != "" && first.BotID == c.me.Load().botID {
		if by, _ := first.Metadata.EventPayload[metaBy].(string); by != "" {
			return by, nil
		}
		return "", errNoStarter
	}
	if first.User == "" {
		return "", errNoStarter
	}
	return first.User, nil
}

// History implements thread.Platform: the thread's messages after
// after, oldest first; the metadata of the app's messages says which
// show a turn's outcome (else their text does).
func (p *platform) History(ctx context.Context, where, after string) ([]thread.Past, error) {
	c := p.client()
	channel, ts, ok := c.parseThread(where)
	if !ok {
		return nil, errNotOurs
	}
	msgs, err := c.replies(ctx, channel, ts, after, 100)
	if err != nil {
		return nil, err
	}
	me := c.me.Load()
	var out []thread.Past
	for _, m := range msgs {
		if after != "" && !tsAfter(m.Timestamp, after) {
			continue
		}
		mine := m.BotID != "" && m.BotID == me.botID
		outcome := thread.ShowsOutcome(m.Text)
		if mine && m.Metadata.EventType == metaEvent {
			outcome = m.Metadata.EventPayload[metaOutcome] == true
		}
		out = append(out, thread.Past{ID: m.Timestamp, At: tsTime(m.Timestamp), Mine: mine, Outcome: outcome})
	}
	return out, nil
}

// Ref implements thread.Referrer: where is a channel, or a thread's
// name, whose channel and ts the reference carries. It asks Slack
// nothing.
func (p *platform) Ref(_ context.Context, where, id string) (string, error) {
	if !validTS(id) {
		return "", fmt.Errorf("%q is not a message's ts", id)
	}
	if channel, ts, ok := p.client().parseThread(where); ok {
		return ref(channel, id, ts), nil
	}
	if !validID(where) {
		return "", fmt.Errorf("%q is neither a channel nor a thread", where)
	}
	return ref(where, id, ""), nil
}

// Locate implements thread.Platform: channel/ts for a message in a
// channel, channel/ts/thread_ts for one in a thread; the link is the
// message's permalink in the workspace.
func (p *platform) Locate(r string) (where, id, link string, ok bool) {
	c := p.client()
	parts := strings.Split(r, "/")
	if len(parts) < 2 || len(parts) > 3 || !validID(parts[0]) || !validTS(parts[1]) {
		return "", "", "", false
	}
	channel, ts := parts[0], parts[1]
	where = channel
	if len(parts) == 3 {
		if !validTS(parts[2]) {
			return "", "", "", false
		}
		where = c.threadKey(channel, parts[2])
	}
	if base := c.me.Load().url; base != "" {
		link = strings.TrimSuffix(base, "/") + "/archives/" + channel + "/p" + strings.ReplaceAll(ts, ".", "")
		if len(parts) == 3 {
			link += "?thread_ts=" + parts[2] + "&cid=" + channel
		}
	}
	return where, ts, link, true
}

// Usage implements thread.Platform: new, agents and schedules are the
// slash command's (/acp new <agent>); the others are written to the app
// in its thread (@app model <value>).
func (p *platform) Usage(command string, args ...thread.Arg) string {
	c := p.client()
	s := "@" + c.botName() + " " + command
	if channelCommand(command) {
		s = c.cfg.Command + " " + command
	}
	for _, a := range args {
		v := a.Value
		if v == "" {
			v = "<" + a.Name + ">"
		}
		s += " " + v
	}
	return s
}

// botName is the app's bot user's name, as people mention it.
func (c *Client) botName() string {
	if n := c.me.Load().name; n != "" {
		return n
	}
	return "app"
}

// Whisper implements thread.Whisperer: chat.postEphemeral, in the thread.
func (p *platform) Whisper(ctx context.Context, where, user string, v thread.View) error {
	return p.client().whisper(ctx, where, user, v)
}

func (c *Client) whisper(ctx context.Context, where, user string, v thread.View) error {
	channel, threadTS := c.place(where)
	set, fallback := blocks(c.unping(v.Text), v.Actions, where)
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(fallback, false), slackapi.MsgOptionBlocks(set...)}
	if threadTS != "" {
		opts = append(opts, slackapi.MsgOptionTS(threadTS))
	}
	return c.call(ctx, "chat.postEphemeral", "", false, func(ctx context.Context) error {
		_, err := c.api.PostEphemeralContext(ctx, channel, user, opts...)
		return err
	})
}

// noteParent records that message ts of channel is in thread, for the
// reactions on it (Slack's name no thread).
func (c *Client) noteParent(channel, ts, thread string) {
	c.mu.Lock()
	c.parents.Put(channel+"/"+ts, thread)
	c.mu.Unlock()
}

// parentOf is the thread message ts of channel is in, if known.
func (c *Client) parentOf(channel, ts string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parents.Get(channel + "/" + ts)
}
