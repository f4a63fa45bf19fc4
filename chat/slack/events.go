package slack

import (
	"crypto/sha256"
	"encoding/json"
	"strings"
	"time"

	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// inbound is one thing Slack sent: an Events API event, an interaction,
// or a slash command.
type inbound struct {
	event       *slackevents.EventsAPIEvent
	interaction *slackapi.InteractionCallback
	command     *slackapi.SlashCommand
	at          time.Time // when it came: a trigger_id is good 3s from then
	// form, for a modal's submission, is its acknowledgement, held back
	// for the Server's answer.
	form *formAck
}

// take queues what Slack sent for dispatch, once: keys (an event's
// event_id, an envelope's id, an interaction's or a command's
// deliveryKeys) already taken mark a retry or a replay, which is counted
// and dropped (a modal's submission dropped so closes the modal). It reports whether in was queued or
// dropped as taken before; false when the queue is full (block: it
// waits for room instead, until the Client ends).
func (c *Client) take(in inbound, block bool, keys ...string) bool {
	c.mu.Lock()
	for _, k := range keys {
		if _, dup := c.seen.Get(k); k != "" && dup {
			c.stats.Deduplicated++
			c.mu.Unlock()
			in.form.send(nil)
			return true
		}
	}
	if !block {
		select {
		case c.queue <- in:
		default:
			c.mu.Unlock()
			return false
		}
	}
	for _, k := range keys {
		if k != "" {
			c.seen.Put(k, struct{}{})
		}
	}
	c.mu.Unlock()
	if block {
		select {
		case c.queue <- in:
		case <-c.ctx.Done():
			return false
		}
	}
	return true
}

// deliveryKeys name an interaction or a slash command for take, so that
// one delivered again (the same trigger_id, or the same content in
// another envelope or request) acts once: each of Slack's carries a
// trigger_id of its own.
func deliveryKeys(in inbound, payload []byte) []string {
	trigger := ""
	switch {
	case in.interaction != nil:
		trigger = in.interaction.TriggerID
	case in.command != nil:
		trigger = in.command.TriggerID
	default:
		return nil
	}
	sum := sha256.Sum256(payload)
	keys := []string{"sum:" + string(sum[:])}
	if trigger != "" {
		keys = append(keys, "trig:"+trigger)
	}
	return keys
}

// dispatch hands what Slack sent to the Server, in the order it came:
// the messages of a thread reach the engine in order.
func (c *Client) dispatch() {
	for {
		select {
		case in := <-c.queue:
			switch {
			case in.event != nil:
				c.onEvent(in.event)
			case in.interaction != nil:
				c.onInteraction(in.interaction, in.at, in.form)
			case in.command != nil:
				c.onCommand(in.command, in.at)
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// eventID is an Events API event's event_id.
func eventID(ev *slackevents.EventsAPIEvent) string {
	if cb, ok := ev.Data.(*slackevents.EventsAPICallbackEvent); ok {
		return cb.EventID
	}
	return ""
}

func (c *Client) onEvent(ev *slackevents.EventsAPIEvent) {
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.MessageEvent:
		c.onMessage(e)
	case *slackevents.AppMentionEvent:
		if e.Edited != nil {
			return // an edit is no new message
		}
		c.onPost(post{channel: e.Channel, ts: e.TimeStamp, threadTS: e.ThreadTimeStamp, user: e.User, botID: e.BotID,
			text: e.Text, files: e.Files})
	case *slackevents.ReactionAddedEvent:
		c.onReaction(e)
	}
}

// post is a message as the events tell it.
type post struct {
	channel, ts, threadTS string
	user, botID           string
	text                  string
	files                 []slackapi.File
	dm                    bool
}

// messageSubtypes are the message events that are someone's new message.
var messageSubtypes = map[string]bool{"": true, "file_share": true, "thread_broadcast": true, "bot_message": true}

func (c *Client) onMessage(e *slackevents.MessageEvent) {
	m := e.Message
	if m == nil || !messageSubtypes[e.SubType] {
		return
	}
	c.onPost(post{channel: e.Channel, ts: m.Timestamp, threadTS: m.ThreadTimestamp, user: m.User, botID: m.BotID,
		text: m.Text, files: m.Files, dm: e.ChannelType == slackevents.ChannelTypeIM})
}

// onPost hands a message to the Server, the app's own left out (but
// noted, for the reactions on it).
func (c *Client) onPost(p post) {
	if p.ts == "" || p.channel == "" {
		return
	}
	reply := p.threadTS != "" && p.threadTS != p.ts
	if reply {
		c.noteParent(p.channel, p.ts, c.threadKey(p.channel, p.threadTS))
	}
	me := c.me.Load()
	if p.user == me.userID || (p.botID != "" && p.botID == me.botID) {
		return
	}
	bot := p.botID != ""
	id := p.user
	if id == "" {
		id = p.botID
	}
	mention := "<@" + me.userID + ">"
	text := strings.TrimSpace(p.text)
	m := thread.Message{
		Where:     p.channel,
		ID:        p.ts,
		Ref:       ref(p.channel, p.ts, p.threadTS),
		From:      c.user(c.ctx, id, bot),
		Text:      strings.TrimSpace(plainText(stripMention(text, me.userID))),
		Mentioned: mentions(text, me.userID),
		Addressed: strings.HasPrefix(text, mention) || strings.HasPrefix(text, "<@"+me.userID+"|"),
		Opens:     c.threadKey(p.channel, p.ts),
	}
	if reply {
		m.Where = c.threadKey(p.channel, p.threadTS)
	} else if p.dm || isDM(p.channel) {
		m.Mentioned = true // a direct message is written to the app
	}
	for _, f := range p.files {
		url := f.URLPrivateDownload
		if url == "" {
			url = f.URLPrivate
		}
		a := thread.Attachment{Name: f.Name, Type: f.Mimetype, Size: int64(f.Size), URL: url}
		if err := c.fileURL(url); err != nil {
			a.Refused = err.Error()
			c.log.Warn().Str("channel", p.channel).Str("ts", p.ts).Str("file", f.ID).Str("url", label(url, 200)).Msg("a shared file's url_private is not on Slack's file host; not fetched")
		}
		m.Files = append(m.Files, a)
	}
	c.srv.Message(m)
}

// mentions reports whether text mentions the user.
func mentions(text, user string) bool {
	return user != "" && (strings.Contains(text, "<@"+user+">") || strings.Contains(text, "<@"+user+"|"))
}

// stripMention takes the mentions of the user out of text.
func stripMention(text, user string) string {
	if user == "" {
		return text
	}
	for from := 0; ; {
		i := strings.Index(text[from:], "<@"+user)
		if i < 0 {
			return text
		}
		i += from
		j := strings.IndexByte(text[i:], '>')
		if j < 0 {
			return text
		}
		if rest := text[i+2+len(user) : i+j]; rest != "" && !strings.HasPrefix(rest, "|") {
			from = i + j // another user, whose id starts as this one's
			continue
		}
		text = text[:i] + text[i+j+1:]
		from = i
	}
}

// onReaction hands a 🛑 on a message (of a thread, or the one a thread
// hangs from) to the Server; the app's own and other reactions are left
// out.
func (c *Client) onReaction(e *slackevents.ReactionAddedEvent) {
	name, _, _ := strings.Cut(e.Reaction, "::") // a skin tone
	if name != emojiStop || e.Item.Type != "message" || e.User == c.me.Load().userID {
		return
	}
	channel, ts := e.Item.Channel, e.Item.Timestamp
	threads := []string{c.threadKey(channel, ts)}
	if t, ok := c.parentOf(channel, ts); ok {
		threads = append(threads, t)
	}
	c.srv.Reaction(thread.Reaction{Threads: threads, From: c.user(c.ctx, e.User, false), Mark: thread.MarkStop})
}

// onInteraction hands a click, a choice in a menu or a modal's answer to
// the Server, with a Reply that answers it through the Web API (the
// interaction itself was acknowledged as it came; a modal's submission
// is acknowledged by its Reply, form, which may keep the modal open with
// errors).
func (c *Client) onInteraction(cb *slackapi.InteractionCallback, at time.Time, form *formAck) {
	from := c.user(c.ctx, cb.User.ID, false)
	switch cb.Type {
	case slackapi.InteractionTypeBlockActions:
		if cb.Container.Type == "view" {
			return // a modal holds no buttons of the broker's
		}
		channel := cb.Container.ChannelID
		if channel == "" {
			channel = cb.Channel.ID
		}
		threadTS := cb.Container.ThreadTs
		if threadTS == "" {
			threadTS = cb.Message.ThreadTimestamp
		}
		for _, a := range cb.ActionCallback.BlockActions {
			if strings.HasPrefix(a.ActionID, linkPrefix) {
				continue
			}
			where := c.clickedWhere(a.BlockID, channel, threadTS)
			_, thTS := c.place(where)
			r := &reply{c: c, user: from.ID, channel: channel, where: where, threadTS: thTS, message: cb.Container.MessageTs,
				ephemeral: cb.Container.IsEphemeral, responseURL: cb.ResponseURL, trigger: cb.TriggerID, at: at}
			c.srv.Click(thread.Click{Where: where, Action: a.ActionID, Values: chosen(a), From: from, Reply: r})
		}
	case slackapi.InteractionTypeViewSubmission:
		var meta formMeta
		json.Unmarshal([]byte(cb.View.PrivateMetadata), &meta)
		values, choices := map[string]string{}, map[string][]string{}
		if cb.View.State != nil {
			for block, actions := range cb.View.State.Values {
				id, ok := strings.CutPrefix(block, fieldBlock)
				if !ok {
					continue
				}
				a, ok := actions[id]
				if !ok {
					continue
				}
				switch a.Type {
				case "static_select", "radio_buttons", "checkboxes", "multi_static_select":
					choices[id] = chosen(&a)
					if choices[id] == nil {
						choices[id] = []string{}
					}
				default:
					values[id] = a.Value
				}
			}
		}
		r := &reply{c: c, user: from.ID, channel: meta.Channel, where: meta.Where, threadTS: meta.ThreadTS, message: meta.Message,
			trigger: cb.TriggerID, at: at, form: form}
		c.srv.Answer(thread.FormAnswer{Form: cb.View.CallbackID, Values: values, Choices: choices, From: from, Reply: r})
	}
}

// clickedWhere is where a click happened: the thread or channel the
// actions block's id names (a message shown to one user alone says no
// thread of its own), if it is the channel clicked in; else the thread
// the message is in, or its channel.
func (c *Client) clickedWhere(blockID, channel, threadTS string) string {
	if rest, ok := strings.CutPrefix(blockID, "w|"); ok {
		if i := strings.LastIndexByte(rest, '|'); i > 0 {
			where := rest[:i]
			if ch, _ := c.place(where); ch == channel {
				return where
			}
		}
	}
	if threadTS != "" {
		return c.threadKey(channel, threadTS)
	}
	return channel
}

// chosen are the values a block action carries: a menu's choices, none
// for a button.
func chosen(a *slackapi.BlockAction) []string {
	if len(a.SelectedOptions) > 0 {
		var out []string
		for _, o := range a.SelectedOptions {
			out = append(out, o.Value)
		}
		return out
	}
	if a.SelectedOption.Value != "" {
		return []string{a.SelectedOption.Value}
	}
	if a.Type == "multi_static_select" {
		return []string{}
	}
	return nil
}
