package discord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"

	"github.com/bwmarrin/discordgo"
)

// openPermission is a permission request waiting for a click. It leaves
// the table on every terminal outcome: a click, a timeout, the turn's end.
type openPermission struct {
	thread  string
	parent  string
	starter string
	title   string
	options []acp.PermissionOption
	answer  chan choice // buffered; written once, by the click that claims it
	ctx     context.Context
}

type choice struct {
	optionID string
	name     string
	by       string // the clicker's user id
	byName   string // and user name
}

// permPrefix starts the custom id of every permission button; the nonce
// keeps buttons of an earlier run of the broker from matching this one's.
var permPrefix = func() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "perm:" + hex.EncodeToString(b) + ":"
}()

// ask posts the request in the thread with one button per option and
// waits for an allowed user's click, returned with the user's id and
// name, or for ctx to end (the permission timeout, or the turn's end),
// which answers "cancelled" and says so.
func (c *Client) ask(ctx context.Context, conv *conversation, req *acp.PermissionRequest) adapter.Answer {
	title := req.ToolCall.Title
	if title == "" {
		title = req.ToolCall.ToolCallID
	}
	starter := c.starterOf(conv)
	op := &openPermission{thread: conv.thread, parent: conv.parent, starter: starter, title: title, options: req.Options,
		answer: make(chan choice, 1), ctx: ctx}
	c.mu.Lock()
	c.sweepLocked()
	c.permSeq++
	key := permPrefix + strconv.FormatUint(c.permSeq, 36)
	c.perms[key] = op
	c.mu.Unlock()
	defer c.closePermission(key)

	who := whoMayAct(starter)
	text := fmt.Sprintf("🔐 **Permission needed**: the agent wants to run **%s**", oneLine(title, 200))
	if in := rawInput(req); in != "" {
		text += "\n```\n" + in + "\n```"
	}
	text += "\n-# " + who + " can answer."
	notPosted := func(cause error) string {
		return fmt.Sprintf("🔐 ~~%s~~\n-# ⌛ Closed without an answer (%v); the agent was told *cancelled*.", oneLine(title, 200), cause)
	}
	msg, err := c.postAsk(ctx, conv.thread, &discordgo.MessageSend{Content: text, Components: buttons(key, req.Options), AllowedMentions: noMentions}, notPosted)
	if err != nil {
		c.log.Warn().Err(err).Str("thread", conv.thread).Msg("permission request not posted; answering cancelled")
		return adapter.Answer{}
	}
	select {
	case ch := <-op.answer:
		return adapter.Answer{Outcome: acp.PermissionOutcome{OptionID: ch.optionID}, By: ch.by, ByName: ch.byName}
	case <-ctx.Done():
	}
	if !c.closePermission(key) {
		// A click claimed it at the same moment; the turn already moved
		// on, and the agent is told "cancelled".
		<-op.answer
		return adapter.Answer{}
	}
	// The agent's answer must not wait on Discord: the edit that closes
	// the message runs on its own goroutine.
	closed := fmt.Sprintf("🔐 ~~%s~~\n-# ⌛ Closed without an answer (%v); the agent was told *cancelled*.", oneLine(title, 200), context.Cause(ctx))
	c.spawnLate(func() { c.closeAsk(conv.thread, msg.ID, closed) })
	return adapter.Answer{}
}

// closePermission removes key from the table and reports whether it was
// still there.
func (c *Client) closePermission(key string) bool { return take(c, c.perms, key) }

// take removes key from one of the Client's tables of open questions
// (guarded by c.mu) and reports whether it was still there: whoever
// takes it answers.
func take[V any](c *Client, table map[string]V, key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := table[key]
	delete(table, key)
	return ok
}

// sweepLocked drops requests whose wait has ended; their owners are
// already answering "cancelled". c.mu must be held.
func (c *Client) sweepLocked() {
	for k, op := range c.perms {
		if op.ctx.Err() != nil {
			delete(c.perms, k)
		}
	}
}

func buttons(key string, options []acp.PermissionOption) []discordgo.MessageComponent {
	var rows []discordgo.MessageComponent
	var row discordgo.ActionsRow
	for i, o := range options {
		style := discordgo.SecondaryButton
		switch {
		case strings.HasPrefix(o.Kind, "allow"):
			style = discordgo.SuccessButton
		case strings.HasPrefix(o.Kind, "reject"):
			style = discordgo.DangerButton
		}
		label := oneLine(o.Name, 80)
		if label == "" {
			label = o.OptionID
		}
		row.Components = append(row.Components, discordgo.Button{Label: label, Style: style, CustomID: key + ":" + strconv.Itoa(i)})
		if len(row.Components) == 5 || i == len(options)-1 {
			rows = append(rows, row)
			row = discordgo.ActionsRow{}
		}
		if len(rows) == 5 {
			break
		}
	}
	return rows
}

// rawInput shows what the tool call will do, if the agent said.
func rawInput(req *acp.PermissionRequest) string {
	raw := strings.TrimSpace(string(req.ToolCall.RawInput))
	if raw == "" || raw == "null" || raw == "{}" {
		return ""
	}
	raw = strings.ReplaceAll(raw, "```", "'''")
	if r := []rune(raw); len(r) > 800 {
		raw = string(r[:799]) + "…"
	}
	return raw
}

func oneLine(s string, n int) string {
	return strings.ReplaceAll(excerpt(s, n), "*", "\\*")
}

// onPermissionClick answers a button click within Discord's 3 seconds:
// the first allowed click claims the request and the buttons are
// replaced by who chose what; anyone else, and any click on a request no
// longer open, gets a private reply.
func (c *Client) onPermissionClick(i *discordgo.Interaction, customID string) {
	cut := strings.LastIndexByte(customID, ':')
	key := customID[:max(cut, 0)]
	idx, _ := strconv.Atoi(customID[cut+1:])
	user, roles := interactionUser(i)
	access := c.acl()
	c.mu.Lock()
	op := c.perms[key]
	switch {
	case op == nil || op.ctx.Err() != nil:
		c.mu.Unlock()
		c.ephemeral(i, "This permission request is no longer open.")
		return
	case !access.channel(op.parent):
		c.mu.Unlock()
		c.ephemeral(i, "This channel is no longer served by the bot; the request can't be answered here.")
		return
	case !access.mayAct(op.parent, op.starter, user.ID, roles):
		c.mu.Unlock()
		c.ephemeral(i, whoMayAct(op.starter)+" can answer this request; you can't.")
		return
	case idx < 0 || idx >= len(op.options):
		c.mu.Unlock()
		c.ephemeral(i, "That button is not one of the request's options.")
		return
	}
	delete(c.perms, key)
	opt := op.options[idx]
	op.answer <- choice{optionID: opt.OptionID, name: opt.Name, by: user.ID, byName: userName(user)}
	c.mu.Unlock()
	c.log.Info().Str("thread", op.thread).Str("user", user.ID).Str("option", opt.OptionID).Msg("permission answered")
	mark := "✅"
	if strings.HasPrefix(opt.Kind, "reject") {
		mark = "⛔"
	}
	c.respond(i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{
			Content:         fmt.Sprintf("🔐 %s\n-# %s <@%s> chose **%s**", oneLine(op.title, 200), mark, user.ID, oneLine(opt.Name, 80)),
			Components:      []discordgo.MessageComponent{},
			AllowedMentions: noMentions,
		},
	})
}

// userName is a user's unique name for the audit trail, else the name
// shown.
func userName(u *discordgo.User) string {
	if u.Username != "" {
		return u.Username
	}
	return displayName(u)
}
