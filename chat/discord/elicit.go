package discord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/adapter"

	"github.com/bwmarrin/discordgo"
)

// Discord's limits on what one question can show.
const (
	maxModalInputs  = 5   // text inputs in one modal
	maxMessageRows  = 5   // action rows in one message, the buttons' included
	maxMenuOptions  = 25  // options in one select menu
	maxLinkURL      = 512 // characters of a link button's url
	modalLabelLimit = 45
	maxInputValue   = 4000 // characters of a modal's text input
)

// openQuestion is an agent's question waiting in a thread. It leaves the
// table on every terminal outcome: an answer, a decline, a timeout, the
// turn's end, the agent withdrawing it.
type openQuestion struct {
	thread, parent, starter string
	req                     *acp.ElicitationRequest
	ctx                     context.Context
	answer                  chan adapter.ElicitAnswer // buffered; written once, by the click that claims it
	// values are the answers so far, by field key: set by the select
	// menus and the modal, read by Submit; guarded by Client.mu.
	values map[string]any
	// texts are the fields asked in the modal, by index.
	texts []int
}

// questionPrefix starts the custom id of every question's components;
// the nonce keeps those of an earlier run of the broker from matching.
var questionPrefix = func() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "elic:" + hex.EncodeToString(b) + ":"
}()

// Elicit implements adapter.Elicitor: see elicit.go.
func (s *turnSink) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	return s.c.elicit(ctx, s.conv, req)
}

var _ adapter.Elicitor = (*turnSink)(nil)

// elicit posts the agent's question in the thread and waits for an
// allowed user's answer, or for ctx to end (the permission timeout, the
// turn's end, the agent withdrawing the question), which answers
// "cancel" and says so. A form is select menus on the message for its
// choices and a button that opens a modal for its text and numbers; a
// url question is a link button (the bot never opens the link) with Done
// and Decline. A form that does not fit Discord's limits is declined,
// saying why.
func (c *Client) elicit(ctx context.Context, conv *conversation, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	texts, selects, unfit := questionLayout(req)
	starter := c.starterOf(conv)
	who := whoMayAct(starter)
	if unfit != nil {
		text := questionHeader(req) + "\n-# ⚠️ This question can't be shown in Discord: " + unfit.Error() + ". The agent was told *decline*."
		if _, err := c.send(ctx, conv.thread, &discordgo.MessageSend{Content: text, AllowedMentions: noMentions, Flags: discordgo.MessageFlagsSuppressEmbeds}); err != nil {
			c.log.Warn().Err(err).Str("thread", conv.thread).Msg("declined question not shown")
		}
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionDecline}}
	}
	oq := &openQuestion{thread: conv.thread, parent: conv.parent, starter: starter, req: req, ctx: ctx,
		answer: make(chan adapter.ElicitAnswer, 1), values: defaults(req), texts: texts}
	c.mu.Lock()
	c.sweepQuestionsLocked()
	c.permSeq++
	key := questionPrefix + strconv.FormatUint(c.permSeq, 36)
	c.questions[key] = oq
	c.mu.Unlock()
	defer c.closeQuestion(key)

	var text string
	var rows []discordgo.MessageComponent
	if req.Mode == acp.ElicitURL {
		text = questionHeader(req) + "\n" + codeSpan(req.URL) + "\n-# The bot does not open the link. " + who + " can answer: **Done** once it is done, or **Decline**."
		rows = []discordgo.MessageComponent{discordgo.ActionsRow{Components: []discordgo.MessageComponent{
			discordgo.Button{Label: linkLabel(req.URL), Style: discordgo.LinkButton, URL: req.URL},
			discordgo.Button{Label: "Done", Style: discordgo.SuccessButton, CustomID: key + ":done"},
			discordgo.Button{Label: "Decline", Style: discordgo.DangerButton, CustomID: key + ":decline"},
		}}}
	} else {
		text = formText(req, who, len(texts) > 0, len(selects) > 0)
		rows = formRows(key, req, texts, selects, oq.values)
	}
	notPosted := func(cause error) string {
		return "❓ ~~" + excerpt(oneLine(req.Message, 300), 300) + fmt.Sprintf("~~\n-# ⌛ Closed without an answer (%v); the agent was told *cancel*.", cause)
	}
	msg, err := c.postAsk(ctx, conv.thread, &discordgo.MessageSend{Content: text, Components: rows, AllowedMentions: noMentions, Flags: discordgo.MessageFlagsSuppressEmbeds}, notPosted)
	if err != nil {
		c.log.Warn().Err(err).Str("thread", conv.thread).Msg("question not posted; answering cancel")
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
	}
	select {
	case ans := <-oq.answer:
		return ans
	case <-ctx.Done():
	}
	if !c.closeQuestion(key) {
		// An answer claimed it at the same moment; the agent is told
		// "cancel" all the same.
		<-oq.answer
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
	}
	cause := context.Cause(ctx)
	why := fmt.Sprintf("⌛ Closed without an answer (%v); the agent was told *cancel*.", cause)
	switch {
	case errors.Is(cause, acp.ErrRequestCancelled):
		why = "↩️ The agent withdrew the question."
	case errors.Is(cause, acp.ErrElicitationComplete):
		why = "✔️ The agent says the task at the link is complete."
	}
	closed := "❓ ~~" + excerpt(oneLine(req.Message, 300), 300) + "~~\n-# " + why
	c.spawnLate(func() { c.closeAsk(conv.thread, msg.ID, closed) })
	return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
}

// questionLayout sorts a form's fields into those asked in the modal and
// those shown as select menus, or says why the form does not fit.
func questionLayout(req *acp.ElicitationRequest) (texts, selects []int, unfit error) {
	if req.Mode == acp.ElicitURL {
		u, err := url.Parse(req.URL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			return nil, nil, errors.New("the link is not an http or https URL")
		case utf8.RuneCountInString(req.URL) > maxLinkURL:
			return nil, nil, fmt.Errorf("the link is longer than the %d characters a Discord button takes", maxLinkURL)
		}
		return nil, nil, nil
	}
	if req.Schema == nil {
		return nil, nil, errors.New("the form has no fields")
	}
	for i, f := range req.Schema.Fields {
		switch f.Kind {
		case acp.FieldText, acp.FieldNumber, acp.FieldInteger:
			texts = append(texts, i)
		case acp.FieldBoolean:
			selects = append(selects, i)
		case acp.FieldSelect, acp.FieldMultiSelect:
			if len(f.Options) > maxMenuOptions {
				return nil, nil, fmt.Errorf("the choice “%s” has %d options, more than the %d a Discord menu holds", f.Label(), len(f.Options), maxMenuOptions)
			}
			selects = append(selects, i)
		default:
			return nil, nil, fmt.Errorf("the field “%s” is of a type (%s) that can't be asked", f.Label(), f.Type)
		}
	}
	for _, i := range texts {
		f := &req.Schema.Fields[i]
		if v, ok := f.DefaultValue(); ok && utf8.RuneCountInString(f.FormatValue(v)) > maxInputValue {
			return nil, nil, fmt.Errorf("the agent's suggestion for “%s” is longer than the %d characters a Discord form field holds", f.Label(), maxInputValue)
		}
	}
	if len(texts) > maxModalInputs {
		return nil, nil, fmt.Errorf("it has %d text fields, more than the %d one Discord form holds", len(texts), maxModalInputs)
	}
	if len(selects) > maxMessageRows-1 {
		return nil, nil, fmt.Errorf("it has %d choices, more than the %d menus one Discord message holds", len(selects), maxMessageRows-1)
	}
	return texts, selects, nil
}

// defaults are the form's values before anyone answers: the agent's
// defaults, where valid, shown as such.
func defaults(req *acp.ElicitationRequest) map[string]any {
	values := map[string]any{}
	if req.Schema == nil {
		return values
	}
	for i := range req.Schema.Fields {
		f := &req.Schema.Fields[i]
		if v, ok := f.DefaultValue(); ok {
			values[f.Key] = v
		}
	}
	return values
}

func questionHeader(req *acp.ElicitationRequest) string {
	if req.Mode == acp.ElicitURL {
		return "🔗 **The agent asks you to open a link**: " + cut(strings.TrimSpace(req.Message), 600)
	}
	return "❓ **The agent asks**: " + cut(strings.TrimSpace(req.Message), 600)
}

// formText lists the form's fields under the question, a line each,
// and says how to answer in small print; what does not fit in a message
// is cut from the fields, never from how to answer.
func formText(req *acp.ElicitationRequest, who string, texts, selects bool) string {
	var b strings.Builder
	b.WriteString(questionHeader(req))
	for _, f := range req.Schema.Fields {
		line := "\n• **" + oneLine(f.Label(), 80) + "**"
		if f.Required {
			line += " *(required)*"
		}
		line += " — " + excerpt(f.Hint(), 120)
		if f.Description != "" {
			line += ": " + excerpt(f.Description, 150)
		}
		b.WriteString(line)
	}
	var how []string
	if selects {
		how = append(how, "choose in the menus")
	}
	if texts {
		how = append(how, "fill in the text with **✏️ Fill in**")
	}
	how = append(how, "then **Submit**")
	footer := "\n-# " + who + " can answer: " + strings.Join(how, ", ") + "."
	return cut(b.String(), 1990-utf8.RuneCountInString(footer)) + footer
}

// formRows are a select menu per choice, then the buttons.
func formRows(key string, req *acp.ElicitationRequest, texts, selects []int, values map[string]any) []discordgo.MessageComponent {
	var rows []discordgo.MessageComponent
	for _, i := range selects {
		f := &req.Schema.Fields[i]
		placeholder := f.Label()
		if f.Required {
			placeholder += " (required)"
		}
		menu := discordgo.SelectMenu{MenuType: discordgo.StringSelectMenu, CustomID: key + ":f:" + strconv.Itoa(i), Placeholder: excerpt(placeholder, 150)}
		current := values[f.Key]
		switch f.Kind {
		case acp.FieldBoolean:
			menu.Options = []discordgo.SelectMenuOption{
				{Label: "Yes", Value: "true", Default: current == true},
				{Label: "No", Value: "false", Default: current == false},
			}
		default:
			chosen, _ := current.([]string)
			for j, o := range f.Options {
				menu.Options = append(menu.Options, discordgo.SelectMenuOption{Label: excerpt(o.Label(), 100), Value: strconv.Itoa(j),
					Default: current == o.Value || slices.Contains(chosen, o.Value)})
			}
		}
		lo, hi := 1, 1
		if !f.Required {
			lo = 0 // a choice that may be left out can be cleared
		}
		if f.Kind == acp.FieldMultiSelect {
			lo, hi = 0, len(f.Options)
			if f.MinItems != nil {
				lo = min(max(*f.MinItems, 0), hi)
			}
			if f.MaxItems != nil {
				hi = max(min(*f.MaxItems, hi), 1)
			}
			lo = min(lo, hi)
		}
		menu.MinValues, menu.MaxValues = &lo, hi
		rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{menu}})
	}
	var buttons []discordgo.MessageComponent
	if len(texts) > 0 {
		buttons = append(buttons, discordgo.Button{Label: "✏️ Fill in", Style: discordgo.PrimaryButton, CustomID: key + ":open"})
	}
	buttons = append(buttons,
		discordgo.Button{Label: "Submit", Style: discordgo.SuccessButton, CustomID: key + ":submit"},
		discordgo.Button{Label: "Decline", Style: discordgo.DangerButton, CustomID: key + ":decline"})
	return append(rows, discordgo.ActionsRow{Components: buttons})
}

// codeSpan shows s verbatim, with nothing in it taken as a link or markup.
func codeSpan(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "%60") + "`"
}

// linkLabel is the link button's label: the whole URL when it fits.
func linkLabel(u string) string {
	if utf8.RuneCountInString(u) <= 80 {
		return u
	}
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		return excerpt("Open "+p.Host+" (full link above)", 80)
	}
	return "Open the link (full link above)"
}

// closeQuestion removes key from the table and reports whether it was
// still there.
func (c *Client) closeQuestion(key string) bool { return take(c, c.questions, key) }

// sweepQuestionsLocked drops questions whose wait has ended; their owners
// are already answering "cancel". c.mu must be held.
func (c *Client) sweepQuestionsLocked() {
	for k, oq := range c.questions {
		if oq.ctx.Err() != nil {
			delete(c.questions, k)
		}
	}
}

// claimQuestion looks up the question a component or modal belongs to
// and checks that user may answer it, telling them privately if not. It
// returns the question with c.mu held, or nil with it released.
func (c *Client) claimQuestion(i *discordgo.Interaction, key string, user *discordgo.User, roles []string) *openQuestion {
	access := c.acl()
	c.mu.Lock()
	oq := c.questions[key]
	switch {
	case oq == nil || oq.ctx.Err() != nil:
		c.mu.Unlock()
		c.ephemeral(i, "This question is no longer open.")
		return nil
	case !access.channel(oq.parent):
		c.mu.Unlock()
		c.ephemeral(i, "This channel is no longer served by the bot; the question can't be answered here.")
		return nil
	case !access.mayAct(oq.parent, oq.starter, user.ID, roles):
		c.mu.Unlock()
		c.ephemeral(i, whoMayAct(oq.starter)+" can answer this question; you can't.")
		return nil
	}
	return oq
}

// onQuestionComponent answers a click or a choice on a question within
// Discord's 3 seconds.
func (c *Client) onQuestionComponent(i *discordgo.Interaction, customID string) {
	parts := strings.SplitN(strings.TrimPrefix(customID, questionPrefix), ":", 3)
	if !strings.HasPrefix(customID, questionPrefix) || len(parts) < 2 {
		c.ephemeral(i, "This question is no longer open.")
		return
	}
	key, action := questionPrefix+parts[0], parts[1]
	user, roles := interactionUser(i)
	oq := c.claimQuestion(i, key, user, roles)
	if oq == nil {
		return
	}
	switch action {
	case "f":
		idx := -1
		if len(parts) == 3 {
			idx, _ = strconv.Atoi(parts[2])
		}
		err := oq.choose(idx, i.MessageComponentData().Values)
		c.mu.Unlock()
		if err != nil {
			c.ephemeral(i, err.Error())
			return
		}
		c.respond(i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseDeferredMessageUpdate})
	case "open":
		modal := oq.modal(key)
		c.mu.Unlock()
		c.respond(i, &discordgo.InteractionResponse{Type: discordgo.InteractionResponseModal, Data: modal})
	case "submit", "done":
		var missing []string
		content := map[string]any{}
		if oq.req.Mode == acp.ElicitForm {
			content = maps.Clone(oq.values)
			for _, f := range oq.req.Schema.Fields {
				if _, ok := content[f.Key]; f.Required && !ok {
					missing = append(missing, "**"+oneLine(f.Label(), 80)+"**")
				}
			}
		}
		if len(missing) > 0 {
			c.mu.Unlock()
			c.ephemeral(i, "Still needed: "+strings.Join(missing, ", ")+". Choose in the menus or use **✏️ Fill in**, then **Submit**.")
			return
		}
		if err := oq.req.Check(content); err != nil {
			c.mu.Unlock()
			c.ephemeral(i, "The answer is not complete: "+err.Error()+".")
			return
		}
		c.answerQuestion(i, key, oq, user, acp.ElicitationResult{Action: acp.ActionAccept, Content: content})
	case "decline":
		c.answerQuestion(i, key, oq, user, acp.ElicitationResult{Action: acp.ActionDecline})
	default:
		c.mu.Unlock()
		c.ephemeral(i, "That is not one of the question's buttons.")
	}
}

// answerQuestion claims the question for user's answer (c.mu held, and
// released here) and replaces its components with who answered what:
// the fields answered by name, never their values, which may be secret.
// (Its marks are not a turn's footer marks, ✅ ❌ ⏹️ ☑️.)
func (c *Client) answerQuestion(i *discordgo.Interaction, key string, oq *openQuestion, user *discordgo.User, res acp.ElicitationResult) {
	delete(c.questions, key)
	oq.answer <- adapter.ElicitAnswer{Result: res, By: user.ID, ByName: userName(user)}
	c.mu.Unlock()
	c.log.Info().Str("thread", oq.thread).Str("user", user.ID).Str("action", res.Action).Msg("question answered")
	var said string
	switch {
	case res.Action == acp.ActionDecline:
		said = "🚫 <@" + user.ID + "> declined."
	case oq.req.Mode == acp.ElicitURL:
		said = "📝 <@" + user.ID + "> says it is done."
	default:
		var names []string
		for _, f := range oq.req.Schema.Fields {
			if _, ok := res.Content[f.Key]; ok {
				names = append(names, "**"+oneLine(f.Label(), 80)+"**")
			}
		}
		said = "📝 <@" + user.ID + "> answered"
		if len(names) > 0 {
			said += ": " + strings.Join(names, ", ")
		}
		said += "."
	}
	c.respond(i, &discordgo.InteractionResponse{
		Type: discordgo.InteractionResponseUpdateMessage,
		Data: &discordgo.InteractionResponseData{
			Content:         cut(questionHeader(oq.req), 1800) + "\n-# " + said,
			Components:      []discordgo.MessageComponent{},
			AllowedMentions: noMentions,
		},
	})
}

// choose records a select menu's values for field idx. c.mu must be held.
func (oq *openQuestion) choose(idx int, values []string) error {
	if oq.req.Schema == nil || idx < 0 || idx >= len(oq.req.Schema.Fields) {
		return errors.New("that menu is not one of the question's")
	}
	f := &oq.req.Schema.Fields[idx]
	switch {
	case len(values) == 0 && f.Kind != acp.FieldMultiSelect:
		delete(oq.values, f.Key)
		return nil
	case f.Kind == acp.FieldBoolean:
		oq.values[f.Key] = values[0] == "true"
		return nil
	}
	chosen := []string{}
	for _, v := range values {
		j, err := strconv.Atoi(v)
		if err != nil || j < 0 || j >= len(f.Options) {
			return errors.New("that is not one of the choices")
		}
		chosen = append(chosen, f.Options[j].Value)
	}
	if f.Kind == acp.FieldMultiSelect {
		oq.values[f.Key] = chosen
	} else {
		oq.values[f.Key] = chosen[0]
	}
	return nil
}

// modal is the form's text fields as a Discord modal, filled in with the
// answers so far. c.mu must be held.
func (oq *openQuestion) modal(key string) *discordgo.InteractionResponseData {
	var rows []discordgo.MessageComponent
	for _, i := range oq.texts {
		f := &oq.req.Schema.Fields[i]
		in := discordgo.TextInput{CustomID: strconv.Itoa(i), Label: excerpt(f.Label(), modalLabelLimit), Style: discordgo.TextInputShort, Required: f.Required}
		hint := f.Hint()
		if f.Description != "" {
			hint = f.Description
		}
		in.Placeholder = excerpt(hint, 100)
		if f.Kind == acp.FieldText {
			if f.MaxLength == nil || *f.MaxLength > 100 {
				in.Style = discordgo.TextInputParagraph
			}
			if f.MinLength != nil {
				in.MinLength = min(max(*f.MinLength, 0), 4000)
			}
			if f.MaxLength != nil {
				in.MaxLength = min(max(*f.MaxLength, 1, in.MinLength), 4000)
			}
		}
		// The value is shown as it is: Discord sends back what the modal
		// shows. Typed ones fit (Discord took them from this modal) and
		// the agent's suggestion was checked by questionLayout.
		if v, ok := oq.values[f.Key]; ok {
			in.Value = f.FormatValue(v)
			if strings.Contains(in.Value, "\n") {
				in.Style = discordgo.TextInputParagraph
			}
		}
		rows = append(rows, discordgo.ActionsRow{Components: []discordgo.MessageComponent{in}})
	}
	title := "Answer the agent"
	if oq.req.Schema.Title != "" {
		title = excerpt(oq.req.Schema.Title, modalLabelLimit)
	}
	return &discordgo.InteractionResponseData{CustomID: key + ":modal", Title: title, Components: rows}
}

// onQuestionModal takes the text fields of a submitted modal: each value
// is checked and kept; the user is told privately what was kept and what
// was not, and nothing typed is shown to anyone else.
func (c *Client) onQuestionModal(i *discordgo.Interaction) {
	d := i.ModalSubmitData()
	key, ok := strings.CutSuffix(d.CustomID, ":modal")
	if !ok || !strings.HasPrefix(key, questionPrefix) {
		c.ephemeral(i, "This form is no longer open.")
		return
	}
	user, roles := interactionUser(i)
	oq := c.claimQuestion(i, key, user, roles)
	if oq == nil {
		return
	}
	var saved, problems []string
	for _, row := range d.Components {
		r, ok := row.(*discordgo.ActionsRow)
		if !ok {
			continue
		}
		for _, comp := range r.Components {
			in, ok := comp.(*discordgo.TextInput)
			if !ok {
				continue
			}
			idx, err := strconv.Atoi(in.CustomID)
			if err != nil || !slices.Contains(oq.texts, idx) {
				continue
			}
			f := &oq.req.Schema.Fields[idx]
			if strings.TrimSpace(in.Value) == "" {
				delete(oq.values, f.Key)
				continue
			}
			v, err := f.Parse(in.Value)
			if err != nil {
				problems = append(problems, "**"+oneLine(f.Label(), 80)+"**: "+err.Error())
				continue
			}
			oq.values[f.Key] = v
			saved = append(saved, "**"+oneLine(f.Label(), 80)+"**")
		}
	}
	c.mu.Unlock()
	var b strings.Builder
	if len(saved) > 0 {
		b.WriteString("Saved " + strings.Join(saved, ", ") + ".")
	}
	if len(problems) > 0 {
		b.WriteString("\nNot saved — " + strings.Join(problems, "; ") + ". Use **✏️ Fill in** again.")
	}
	b.WriteString("\nPress **Submit** on the question when it is complete.")
	c.ephemeral(i, strings.TrimSpace(b.String()))
}
