package discord

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"

	"github.com/bwmarrin/discordgo"
)

// conversation is a thread the broker opened: its messages are prompts
// for one agent session.
type conversation struct {
	thread string // the thread's channel id, and the engine's thread key
	parent string
	// starter is the user who started it, who may act on it; empty while
	// unknown. It and unsure are guarded by Client.mu once the
	// conversation is shared.
	starter string
	unsure  bool      // the last lookup of the starter failed for a passing reason
	used    time.Time // its last message or command; guarded by Client.mu
	// agent is the profile the thread was opened with ("": its channel's
	// or the default); the engine keeps the one its first prompt names.
	agent string
	// lastSink is closed once the thread's latest turn has shown its end
	// (see newTurnSink); guarded by Client.mu.
	lastSink chan struct{}
}

// convSweepEvery spaces the sweeps of forgotten conversations: a sweep
// walks them all, so it runs at most this often on the way of new ones.
const convSweepEvery = time.Minute

// keepLocked records conv as used now (adding it to the conversations if
// it is new) and reports whether the conversations are due a sweep.
func (c *Client) keepLocked(conv *conversation) (sweep bool) {
	now := time.Now()
	conv.used = now
	c.convs[conv.thread] = conv
	if now.Sub(c.swept) < min(c.cfg.ForgetAfter, convSweepEvery) {
		return false
	}
	c.swept = now
	return true
}

// sweep forgets conversations idle longer than ForgetAfter whose thread
// has no turn running or queued. Called outside c.mu: the engine is asked
// about each candidate without the Client's lock held.
func (c *Client) sweep() {
	c.mu.Lock()
	cutoff := time.Now().Add(-c.cfg.ForgetAfter)
	var idle []*conversation
	for _, conv := range c.convs {
		if conv.used.Before(cutoff) {
			idle = append(idle, conv)
		}
	}
	c.mu.Unlock()
	for _, conv := range idle {
		if st := c.engine.Status(conv.thread); st.Busy || st.Queued > 0 {
			continue
		}
		c.mu.Lock()
		if c.convs[conv.thread] == conv && conv.used.Before(cutoff) {
			delete(c.convs, conv.thread)
		}
		c.mu.Unlock()
	}
}

// Status reactions on the user's message.
const (
	emojiQueued    = "⏳"
	emojiWorking   = "⚙️"
	emojiDone      = "✅"
	emojiFailed    = "❌"
	emojiCancelled = "⏹️"
	emojiRefused   = "🚫"
	emojiLost      = "⚠️" // the answer could not be shown
	emojiCancel    = "🛑"  // a user's reaction that cancels the turn
)

// What a permission request's and a question's messages start with.
const (
	markPermission = "🔐"
	markQuestion   = "❓"
)

// An answer's footer mark for a turn that ended without a final answer
// (a refusal, a turn cut short), and the start of the status line shown
// while a turn is being stopped (adapter.PhaseCancelling's text).
const (
	emojiFinishedOther = "☑️"
	stoppingPrefix     = "stopping:"
)

func (c *Client) onMessage(_ *discordgo.Session, m *discordgo.MessageCreate) {
	if m.Author == nil || m.GuildID == "" {
		return
	}
	me := c.me()
	if m.Author.ID == me || (m.Author.Bot && !slices.Contains(c.acl().AllowedBots, m.Author.ID)) {
		return
	}
	mentioned := mentions(m.Message, me)
	c.mu.Lock()
	if !c.accepting || !c.seen.add(m.ID) {
		c.mu.Unlock()
		return
	}
	conv := c.convs[m.ChannelID]
	if conv == nil && !mentioned && c.access.channel(m.ChannelID) {
		c.mu.Unlock()
		return // ordinary chatter in an allowed channel
	}
	// Messages of one thread reach the engine in the order Discord sent
	// them, though each is prepared (attachments downloaded, the thread
	// opened) on its own goroutine. A thread started from a message has
	// that message's id.
	key := m.ChannelID
	if conv == nil && mentioned {
		key = m.ID
	}
	prev, done := c.order[key], make(chan struct{})
	c.order[key] = done
	sweep := conv != nil && c.keepLocked(conv)
	c.mu.Unlock()
	if sweep {
		c.sweep()
	}
	c.spawn(func() {
		defer c.inOrderDone(key, done)
		c.handleMessage(m.Message, conv, mentioned, prev)
	})
}

// inOrderDone lets the thread's next message go on to the engine.
func (c *Client) inOrderDone(key string, done chan struct{}) {
	close(done)
	c.mu.Lock()
	if c.order[key] == done {
		delete(c.order, key)
	}
	c.mu.Unlock()
}

func mentions(m *discordgo.Message, me string) bool {
	for _, u := range m.Mentions {
		if u != nil && u.ID == me {
			return true
		}
	}
	return strings.Contains(m.Content, "<@"+me+">") || strings.Contains(m.Content, "<@!"+me+">")
}

func stripMention(s, me string) string {
	s = strings.ReplaceAll(s, "<@!"+me+">", "")
	s = strings.ReplaceAll(s, "<@"+me+">", "")
	return strings.TrimSpace(s)
}

// handleMessage turns a message into a prompt: in a conversation thread,
// the next prompt; with a mention in an allowed channel, the first prompt
// of a new thread.
// It submits only once prev (the thread's previous message, if any) is
// through.
func (c *Client) handleMessage(m *discordgo.Message, conv *conversation, mentioned bool, prev <-chan struct{}) {
	ctx := c.ctx
	if conv == nil {
		conv = c.adoptThread(ctx, m.ChannelID)
		if conv == nil && (!mentioned || !c.allowedChannel(m.ChannelID)) {
			return
		}
	}
	if conv != nil && !c.allowedChannel(conv.parent) {
		c.mu.Lock()
		c.stats.RefusedChannels++
		c.mu.Unlock()
		c.log.Info().Str("thread", conv.thread).Str("channel", conv.parent).Msg("message in a thread of a channel no longer allowed; refused")
		c.react(m.ChannelID, m.ID, emojiRefused)
		c.replyTo(ctx, m, "This channel is no longer served by the bot; nothing was sent to the agent.")
		return
	}
	if conv != nil {
		c.resolveStarter(ctx, conv)
	}
	var roles []string
	if m.Member != nil {
		roles = m.Member.Roles
	}
	if !c.allowedUser(m.Author.ID, roles) {
		c.mu.Lock()
		c.stats.RefusedUsers++
		c.mu.Unlock()
		c.log.Info().Str("user", m.Author.ID).Str("channel", m.ChannelID).Msg("message from a user who is not allowed; refused")
		c.react(m.ChannelID, m.ID, emojiRefused)
		return
	}
	text := stripMention(m.Content, c.me())
	blocks, images, refusal := c.attachments(ctx, m)
	if refusal == "" && text == "" && len(blocks) == 0 && len(images) == 0 {
		refusal = "Mention me with a question or a task, and I will start an agent on it in a thread."
	}
	if refusal != "" {
		c.mu.Lock()
		c.stats.RefusedAttachments++
		c.mu.Unlock()
		c.react(m.ChannelID, m.ID, emojiFailed)
		c.replyTo(ctx, m, refusal)
		return
	}
	if text != "" {
		blocks = append([]acp.ContentBlock{acp.TextBlock(text)}, blocks...)
	}
	if conv == nil {
		var err error
		if conv, err = c.openThread(ctx, m, text); err != nil {
			c.log.Error().Err(err).Str("channel", m.ChannelID).Msg("could not open a thread")
			c.react(m.ChannelID, m.ID, emojiFailed)
			c.replyTo(ctx, m, "I could not open a thread for this: "+err.Error())
			return
		}
	}
	if prev != nil {
		select {
		case <-prev:
		case <-ctx.Done():
			return
		}
	}
	sink := newTurnSink(c, conv, m)
	p := &adapter.Prompt{Ref: ref(m), Title: excerpt(text, 80), Author: m.Author.ID, Agent: conv.agent, Blocks: blocks, Images: images, Sink: sink}
	if err := c.engine.Submit(conv.thread, p); err != nil {
		sink.refused(err)
	}
}

// openThread starts a thread from the message that mentioned the bot,
// with its channel's agent.
func (c *Client) openThread(ctx context.Context, m *discordgo.Message, text string) (*conversation, error) {
	return c.startThread(ctx, m.ChannelID, m.ID, threadName(text, m.Author), m.Author.ID, c.acl().ChannelAgents[m.ChannelID])
}

// startThread opens a thread from message in channel, started by starter
// with agent ("": the channel's or the default), and keeps it.
func (c *Client) startThread(ctx context.Context, channel, message, name, starter, agent string) (*conversation, error) {
	var ch *discordgo.Channel
	err := c.do(ctx, 10, func(opts ...discordgo.RequestOption) error {
		var err error
		ch, err = c.s.MessageThreadStartComplex(channel, message, &discordgo.ThreadStart{Name: name, AutoArchiveDuration: 1440}, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	conv := &conversation{thread: ch.ID, parent: channel, starter: starter, agent: agent}
	c.mu.Lock()
	sweep := c.keepLocked(conv)
	c.mu.Unlock()
	if sweep {
		c.sweep()
	}
	c.remember(conv)
	c.log.Info().Str("thread", ch.ID).Str("user", starter).Str("name", name).Str("agent", agent).Msg("conversation started")
	return conv, nil
}

// adoptThread recognises a thread the broker opened before it restarted:
// a thread owned by the bot. One in a channel no longer allowed is
// recognised too, so that what is sent there is refused in words, as it
// is before a restart; every use of a conversation checks its channel
// against the access lists in force. Its starter is the one
// the broker recorded when it opened the thread or, failing that, the
// author of the message it was started from, which shares its id.
func (c *Client) adoptThread(ctx context.Context, id string) *conversation {
	ch, err := c.s.State.Channel(id)
	if err != nil {
		err = c.call(ctx, func(opts ...discordgo.RequestOption) error {
			var err error
			ch, err = c.s.Channel(id, opts...)
			return err
		})
	}
	if err != nil || ch == nil || !ch.IsThread() || ch.OwnerID != c.me() {
		return nil
	}
	recorded := c.recorded(ch.ID)
	conv := &conversation{thread: ch.ID, parent: ch.ParentID, starter: recorded.Starter, agent: recorded.Agent}
	if conv.starter == "" {
		conv.starter, conv.unsure = c.lookupStarter(ctx, ch.ParentID, ch.ID)
	}
	c.mu.Lock()
	known := c.convs[id]
	sweep := false
	if known == nil {
		sweep = c.keepLocked(conv)
	}
	c.mu.Unlock()
	if known != nil {
		return known
	}
	if sweep {
		c.sweep()
	}
	if !conv.unsure {
		c.remember(conv) // never a passing failure over what is recorded
	}
	return conv
}

// Looking up a thread's starter: a failure other than "no such message"
// is tried again, starterRetry apart and doubling, starterLookups times in
// all; the Client's end interrupts the waits.
const (
	starterLookups = 3
	starterRetry   = 500 * time.Millisecond
)

// lookupStarter finds the author of the message thread was started from.
// unsure reports a failure that may pass (a 5xx, a timeout, rate limits):
// the starter is then unknown for now, not for good.
func (c *Client) lookupStarter(ctx context.Context, parent, thread string) (starter string, unsure bool) {
	wait := starterRetry
	for try := 1; ; try++ {
		var first *discordgo.Message
		err := c.do(ctx, 3, func(opts ...discordgo.RequestOption) error {
			var err error
			first, err = c.s.ChannelMessage(parent, thread, opts...)
			return err
		})
		switch {
		case err == nil && first.Author != nil:
			return first.Author.ID, false
		case err == nil || notFound(err):
			return "", false // deleted: only approvers may act on it
		}
		c.log.Warn().Err(err).Str("thread", thread).Int("try", try).Msg("thread starter not found; only approvers may act on it meanwhile")
		if try == starterLookups || !c.sleep(ctx, wait) {
			return "", true
		}
		wait *= 2
	}
}

// resolveStarter tries again to find the starter of a conversation whose
// last lookup failed for a passing reason.
func (c *Client) resolveStarter(ctx context.Context, conv *conversation) {
	c.mu.Lock()
	unsure := conv.unsure
	c.mu.Unlock()
	if !unsure {
		return
	}
	starter, unsure := c.lookupStarter(ctx, conv.parent, conv.thread)
	c.mu.Lock()
	if conv.starter == "" {
		conv.starter = starter
	}
	conv.unsure = unsure
	c.mu.Unlock()
	if !unsure {
		c.remember(conv)
	}
}

// starterOf is the conversation's starter, or "" while it is unknown.
func (c *Client) starterOf(conv *conversation) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return conv.starter
}

func notFound(err error) bool {
	var rest *discordgo.RESTError
	return errors.As(err, &rest) && rest.Response != nil && rest.Response.StatusCode == http.StatusNotFound
}

// threadName is the first line of the prompt, trimmed to Discord's limit.
func threadName(text string, author *discordgo.User) string {
	line, _, _ := strings.Cut(text, "\n")
	if name := excerpt(line, 90); name != "" {
		return name
	}
	return "Conversation with " + author.Username
}

// excerpt collapses whitespace and cuts s to at most n runes.
func excerpt(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// cut shortens s to at most n characters, "…" last when it was cut,
// keeping its lines and spaces as they are.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func (c *Client) replyTo(ctx context.Context, m *discordgo.Message, text string) {
	_, err := c.send(ctx, m.ChannelID, &discordgo.MessageSend{
		Content:         text,
		Reference:       m.Reference(),
		AllowedMentions: &discordgo.MessageAllowedMentions{},
	})
	if err != nil {
		c.log.Warn().Err(err).Msg("reply not sent")
	}
}

// textExts are attachments inlined as text whatever their content type.
var textExts = []string{".md", ".txt", ".log", ".go", ".py", ".js", ".ts", ".tsx", ".jsx", ".rs", ".java", ".kt", ".c", ".h",
	".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".zsh", ".ps1", ".json", ".yaml", ".yml", ".toml",
	".ini", ".cfg", ".conf", ".xml", ".html", ".css", ".scss", ".sql", ".csv", ".tsv", ".diff", ".patch", ".proto", ".graphql"}

// attachments turns a message's attachments into prompt content: text
// files inlined, images as image blocks. Anything over a limit or of
// another kind refuses the whole message, with the reason in words, so
// the user can send it again without it.
func (c *Client) attachments(ctx context.Context, m *discordgo.Message) (text, images []acp.ContentBlock, refusal string) {
	for _, a := range m.Attachments {
		ctype, _, _ := strings.Cut(a.ContentType, ";")
		isImage := strings.HasPrefix(ctype, "image/")
		isText := strings.HasPrefix(ctype, "text/") || ctype == "application/json" ||
			slices.Contains(textExts, strings.ToLower(filepath.Ext(a.Filename)))
		limit := c.cfg.MaxTextBytes
		kind := "text files"
		switch {
		case isImage:
			limit, kind = c.cfg.MaxImageBytes, "images"
		case !isText:
			return nil, nil, fmt.Sprintf("I can't pass %q (%s) to the agent: only images and text files can be attached. Nothing was sent; please try again without it.", a.Filename, orUnknown(ctype))
		}
		if int64(a.Size) > limit {
			return nil, nil, fmt.Sprintf("%q is %s; the limit for %s is %s. Nothing was sent; please try again with a smaller file.", a.Filename, size(int64(a.Size)), kind, size(limit))
		}
		body, err := c.download(ctx, a.URL, limit)
		if err != nil {
			return nil, nil, fmt.Sprintf("I could not read %q: %v. Nothing was sent; please try again.", a.Filename, err)
		}
		if isImage {
			images = append(images, acp.ContentBlock{Type: "image", MimeType: ctype, Data: base64.StdEncoding.EncodeToString(body)})
			continue
		}
		if !utf8.Valid(body) {
			return nil, nil, fmt.Sprintf("%q is not UTF-8 text. Nothing was sent; please try again without it.", a.Filename)
		}
		name := strings.ToValidUTF8(a.Filename, "\uFFFD") // a name is text for the agent too
		text = append(text, acp.TextBlock(fmt.Sprintf("Attached file %s:\n```\n%s\n```", name, strings.TrimRight(string(body), "\n"))))
	}
	return text, images, ""
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown type"
	}
	return s
}

// download fetches an attachment, refusing more than limit bytes.
func (c *Client) download(ctx context.Context, url string, limit int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("it is larger than the limit of %s", size(limit))
	}
	return body, nil
}

// size prints a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
