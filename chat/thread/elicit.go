package thread

import (
	"context"
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
	"acpbroker/chat"
)

// How long the labels of a question's actions and form may be: what
// Discord shows (a platform that shows less cuts them further).
const (
	formLabelRunes   = 45 // a form's title and its fields' labels
	placeholderRunes = 100
)

// openQuestion is an agent's question waiting in a thread. It leaves the
// table on every terminal outcome: an answer, a decline, a timeout, the
// turn's end, the agent withdrawing it.
type openQuestion struct {
	thread, channel, starter string
	req                      *acp.ElicitationRequest
	ctx                      context.Context
	answer                   chan adapter.ElicitAnswer // buffered; written once, by the click that claims it
	// values are the answers so far, by field key: set by the select
	// menus and the form, read by Submit; guarded by Server.mu.
	values map[string]any
	// texts are the fields asked in the form, by index.
	texts []int
	// said, once a program or the web answered it (AnswerFor), says so
	// for its message; guarded by Server.mu.
	said string
}

// questionPrefix starts the action id of every question's actions; the
// nonce keeps those of an earlier run of the broker from matching.
var questionPrefix = "elic:" + nonce() + ":"

// elicit posts the agent's question in the thread and waits for an
// allowed user's answer, or for ctx to end (the permission timeout, the
// turn's end, the agent withdrawing the question), which answers
// "cancel" and says so. A form is select menus on the message for its
// choices and a button that opens a form for its text and numbers; a
// url question is a link button (the bot never opens the link) with Done
// and Decline. A form that does not fit the platform's limits is
// declined, saying why.
func (s *Server) elicit(ctx context.Context, conv *conversation, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	texts, selects, unfit := s.questionLayout(req)
	starter := s.starterOf(conv)
	who := whoMayAct(starter)
	if unfit != nil {
		text := questionHeader(req) + "\n-# ⚠️ This question can't be shown in " + s.lim.Name + ": " + unfit.Error() + ". The agent was told *decline*."
		if _, err := s.post(ctx, conv.thread, View{Text: text, NoPreview: true}); err != nil {
			s.log.Warn().Err(err).Str("thread", conv.thread).Msg("declined question not shown")
		}
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionDecline}}
	}
	oq := &openQuestion{thread: conv.thread, channel: conv.channel, starter: starter, req: req, ctx: ctx,
		answer: make(chan adapter.ElicitAnswer, 1), values: defaults(req), texts: texts}
	s.mu.Lock()
	s.sweepQuestionsLocked()
	s.permSeq++
	key := questionPrefix + strconv.FormatUint(s.permSeq, 36)
	s.questions[key] = oq
	s.mu.Unlock()
	defer s.closeQuestion(key)

	var v View
	if req.Mode == acp.ElicitURL {
		v.Text = questionHeader(req) + "\n" + codeSpan(req.URL) + "\n-# The bot does not open the link. " + who + " can answer: **Done** once it is done, or **Decline**."
		v.Actions = []Action{
			{Label: linkLabel(req.URL), URL: req.URL},
			{ID: key + ":done", Label: "Done", Style: Success},
			{ID: key + ":decline", Label: "Decline", Style: Danger},
		}
	} else {
		v.Text = s.formText(req, who, len(texts) > 0, len(selects) > 0)
		v.Actions = formActions(key, req, texts, selects, oq.values)
		if s.lim.WholeForms {
			v.Actions = []Action{
				{ID: key + ":open", Label: "✏️ Answer", Style: Primary},
				{ID: key + ":decline", Label: "Decline", Style: Danger},
			}
		}
	}
	v.NoPreview = true
	closed := func(cause error) string {
		return markQuestion + " ~~" + excerpt(oneLine(req.Message, 300), 300) + fmt.Sprintf("~~\n-# ⌛ Closed without an answer (%v); the agent was told *cancel*.", cause)
	}
	id, err := s.postAsk(ctx, conv.thread, v, closed)
	if err != nil {
		s.log.Warn().Err(err).Str("thread", conv.thread).Msg("question not posted; answering cancel")
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
	}
	select {
	case ans := <-oq.answer:
		s.mu.Lock()
		said := oq.said
		s.mu.Unlock()
		if said != "" {
			text := cut(questionHeader(req), s.lim.MessageRunes-200) + "\n-# " + said
			s.spawnLate(func() { s.closeAsk(conv.thread, id, text) })
		}
		return ans
	case <-ctx.Done():
	}
	if !s.closeQuestion(key) {
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
	text := markQuestion + " ~~" + excerpt(oneLine(req.Message, 300), 300) + "~~\n-# " + why
	s.spawnLate(func() { s.closeAsk(conv.thread, id, text) })
	return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
}

// questionLayout sorts a form's fields into those asked in the form and
// those shown as select menus, or says why the question does not fit
// the platform.
func (s *Server) questionLayout(req *acp.ElicitationRequest) (texts, selects []int, unfit error) {
	name := s.lim.Name
	if req.Mode == acp.ElicitURL {
		u, err := url.Parse(req.URL)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			return nil, nil, errors.New("the link is not an http or https URL")
		case utf8.RuneCountInString(req.URL) > s.lim.LinkRunes:
			return nil, nil, fmt.Errorf("the link is longer than the %d characters a %s button takes", s.lim.LinkRunes, name)
		}
		return nil, nil, nil
	}
	if req.Schema == nil {
		return nil, nil, errors.New("the form has no fields")
	}
	if s.lim.WholeForms {
		return s.wholeFormLayout(req)
	}
	for i, f := range req.Schema.Fields {
		switch f.Kind {
		case acp.FieldText, acp.FieldNumber, acp.FieldInteger:
			texts = append(texts, i)
		case acp.FieldBoolean:
			selects = append(selects, i)
		case acp.FieldSelect, acp.FieldMultiSelect:
			if len(f.Options) > s.lim.MenuOptions {
				return nil, nil, fmt.Errorf("the choice “%s” has %d options, more than the %d a %s menu holds", f.Label(), len(f.Options), s.lim.MenuOptions, name)
			}
			selects = append(selects, i)
		default:
			return nil, nil, fmt.Errorf("the field “%s” is of a type (%s) that can't be asked", f.Label(), f.Type)
		}
	}
	for _, i := range texts {
		f := &req.Schema.Fields[i]
		if v, ok := f.DefaultValue(); ok && utf8.RuneCountInString(chat.FieldValue(f, v)) > s.lim.FieldRunes {
			return nil, nil, fmt.Errorf("the agent's suggestion for “%s” is longer than the %d characters a %s form field holds", f.Label(), s.lim.FieldRunes, name)
		}
	}
	switch {
	case len(texts) > 0 && s.lim.FormFields == 0:
		return nil, nil, fmt.Errorf("it has %d text fields, and %s has no forms to ask them in", len(texts), name)
	case len(texts) > s.lim.FormFields:
		return nil, nil, fmt.Errorf("it has %d text fields, more than the %d one %s form holds", len(texts), s.lim.FormFields, name)
	case len(selects) > s.lim.Menus:
		return nil, nil, fmt.Errorf("it has %d choices, more than the %d menus one %s message holds", len(selects), s.lim.Menus, name)
	}
	return texts, selects, nil
}

// wholeFormLayout asks every field of a form in the platform's form
// (Limits.WholeForms), or says why the question does not fit.
func (s *Server) wholeFormLayout(req *acp.ElicitationRequest) (fields, _ []int, unfit error) {
	name := s.lim.Name
	for i := range req.Schema.Fields {
		f := &req.Schema.Fields[i]
		switch f.Kind {
		case acp.FieldText, acp.FieldNumber, acp.FieldInteger:
			if v, ok := f.DefaultValue(); ok && utf8.RuneCountInString(chat.FieldValue(f, v)) > s.lim.FieldRunes {
				return nil, nil, fmt.Errorf("the agent's suggestion for “%s” is longer than the %d characters a %s form field holds", f.Label(), s.lim.FieldRunes, name)
			}
		case acp.FieldBoolean:
		case acp.FieldSelect, acp.FieldMultiSelect:
			if len(f.Options) > s.lim.MenuOptions {
				return nil, nil, fmt.Errorf("the choice “%s” has %d options, more than the %d a %s menu holds", f.Label(), len(f.Options), s.lim.MenuOptions, name)
			}
		default:
			return nil, nil, fmt.Errorf("the field “%s” is of a type (%s) that can't be asked", f.Label(), f.Type)
		}
		fields = append(fields, i)
	}
	if len(fields) > s.lim.FormFields {
		return nil, nil, fmt.Errorf("it has %d fields, more than the %d one %s form holds", len(fields), s.lim.FormFields, name)
	}
	return fields, nil, nil
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
	return markQuestion + " **The agent asks**: " + cut(strings.TrimSpace(req.Message), 600)
}

// formText lists the form's fields under the question, a line each,
// and says how to answer in small print; what does not fit in a message
// is cut from the fields, never from how to answer.
func (s *Server) formText(req *acp.ElicitationRequest, who string, texts, selects bool) string {
	var b strings.Builder
	b.WriteString(questionHeader(req))
	for _, f := range req.Schema.Fields {
		line := "\n• **" + oneLine(f.Label(), 80) + "**"
		if f.Required {
			line += " *(required)*"
		}
		line += " — " + excerpt(chat.FieldHint(&f), 120)
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
	if s.lim.WholeForms {
		how = []string{"**✏️ Answer** opens the form, and its **Submit** sends the answer"}
	}
	footer := "\n-# " + who + " can answer: " + strings.Join(how, ", ") + "."
	return cut(b.String(), s.lim.MessageRunes-10-utf8.RuneCountInString(footer)) + footer
}

// formActions are a select menu per choice, then the buttons.
func formActions(key string, req *acp.ElicitationRequest, texts, selects []int, values map[string]any) []Action {
	var out []Action
	for _, i := range selects {
		f := &req.Schema.Fields[i]
		placeholder := f.Label()
		if f.Required {
			placeholder += " (required)"
		}
		menu := &Menu{Placeholder: excerpt(placeholder, 150)}
		current := values[f.Key]
		switch f.Kind {
		case acp.FieldBoolean:
			menu.Options = []Option{
				{Label: "Yes", Value: "true", Default: current == true},
				{Label: "No", Value: "false", Default: current == false},
			}
		default:
			chosen, _ := current.([]string)
			for j, o := range f.Options {
				menu.Options = append(menu.Options, Option{Label: excerpt(o.Label(), 100), Value: strconv.Itoa(j),
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
		menu.Min, menu.Max = lo, hi
		out = append(out, Action{ID: key + ":f:" + strconv.Itoa(i), Menu: menu})
	}
	if len(texts) > 0 {
		out = append(out, Action{ID: key + ":open", Label: "✏️ Fill in", Style: Primary})
	}
	return append(out,
		Action{ID: key + ":submit", Label: "Submit", Style: Success},
		Action{ID: key + ":decline", Label: "Decline", Style: Danger})
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
func (s *Server) closeQuestion(key string) bool { return take(s, s.questions, key) }

// sweepQuestionsLocked drops questions whose wait has ended; their owners
// are already answering "cancel". s.mu must be held.
func (s *Server) sweepQuestionsLocked() {
	for k, oq := range s.questions {
		if oq.ctx.Err() != nil {
			delete(s.questions, k)
		}
	}
}

// claimQuestion looks up the question an action or a form belongs to
// and checks that u may answer it, telling them privately if not. It
// returns the question with s.mu held, or nil with it released.
func (s *Server) claimQuestion(reply Reply, key string, u User) *openQuestion {
	access := s.acl()
	s.mu.Lock()
	oq := s.questions[key]
	switch {
	case oq == nil || oq.ctx.Err() != nil:
		s.mu.Unlock()
		s.tell(reply, "This question is no longer open.")
		return nil
	case !access.channel(oq.channel):
		s.mu.Unlock()
		s.tell(reply, "This channel is no longer served by the bot; the question can't be answered here.")
		return nil
	case !access.mayAct(oq.channel, oq.starter, u):
		s.mu.Unlock()
		s.tell(reply, whoMayAct(oq.starter)+" can answer this question; you can't.")
		return nil
	}
	return oq
}

// onQuestionClick answers a click or a choice on a question.
func (s *Server) onQuestionClick(c Click) {
	parts := strings.SplitN(strings.TrimPrefix(c.Action, questionPrefix), ":", 3)
	if !strings.HasPrefix(c.Action, questionPrefix) || len(parts) < 2 {
		s.tell(c.Reply, "This question is no longer open.")
		return
	}
	key, action := questionPrefix+parts[0], parts[1]
	oq := s.claimQuestion(c.Reply, key, c.From)
	if oq == nil {
		return
	}
	switch action {
	case "f":
		idx := -1
		if len(parts) == 3 {
			idx, _ = strconv.Atoi(parts[2])
		}
		err := oq.choose(idx, c.Values)
		s.mu.Unlock()
		if err != nil {
			s.tell(c.Reply, err.Error())
			return
		}
		c.Reply.Ack(s.ctx)
	case "open":
		form := oq.form(key, s.lim)
		s.mu.Unlock()
		c.Reply.Form(s.ctx, form)
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
			s.mu.Unlock()
			s.tell(c.Reply, "Still needed: "+strings.Join(missing, ", ")+". Choose in the menus or use **✏️ Fill in**, then **Submit**.")
			return
		}
		if err := oq.req.Check(content); err != nil {
			s.mu.Unlock()
			s.tell(c.Reply, "The answer is not complete: "+err.Error()+".")
			return
		}
		s.answerQuestion(c, key, oq, acp.ElicitationResult{Action: acp.ActionAccept, Content: content})
	case "decline":
		s.answerQuestion(c, key, oq, acp.ElicitationResult{Action: acp.ActionDecline})
	default:
		s.mu.Unlock()
		s.tell(c.Reply, "That is not one of the question's buttons.")
	}
}

// answerQuestion claims the question for the clicker's answer (s.mu
// held, and released here) and replaces its actions with who answered
// what: the fields answered by name, never their values, which may be
// secret. (Its marks are not a turn's footer marks, ✅ ❌ ⏹️ ☑️.)
func (s *Server) answerQuestion(c Click, key string, oq *openQuestion, res acp.ElicitationResult) {
	delete(s.questions, key)
	oq.answer <- adapter.ElicitAnswer{Result: res, By: c.From.ID, ByName: c.From.handle()}
	s.mu.Unlock()
	s.log.Info().Str("thread", oq.thread).Str("user", c.From.ID).Str("action", res.Action).Msg("question answered")
	var said string
	switch {
	case res.Action == acp.ActionDecline:
		said = "🚫 <@" + c.From.ID + "> declined."
	case oq.req.Mode == acp.ElicitURL:
		said = "📝 <@" + c.From.ID + "> says it is done."
	default:
		var names []string
		for _, f := range oq.req.Schema.Fields {
			if _, ok := res.Content[f.Key]; ok {
				names = append(names, "**"+oneLine(f.Label(), 80)+"**")
			}
		}
		said = "📝 <@" + c.From.ID + "> answered"
		if len(names) > 0 {
			said += ": " + strings.Join(names, ", ")
		}
		said += "."
	}
	c.Reply.Update(s.ctx, View{Text: cut(questionHeader(oq.req), s.lim.MessageRunes-200) + "\n-# " + said})
}

// choose records a select menu's values for field idx. s.mu must be held.
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

// form is the question's fields asked in a form (its text fields, or
// all of them with Limits.WholeForms) as a Form, filled in with the
// answers so far. s.mu must be held.
func (oq *openQuestion) form(key string, lim Limits) Form {
	var fields []Field
	for _, i := range oq.texts {
		f := &oq.req.Schema.Fields[i]
		in := Field{ID: strconv.Itoa(i), Label: excerpt(f.Label(), formLabelRunes), Required: f.Required}
		hint := chat.FieldHint(f)
		if f.Description != "" {
			hint = f.Description
		}
		in.Placeholder = excerpt(hint, placeholderRunes)
		if lim.WholeForms && wholeField(&in, f, oq.values[f.Key]) {
			fields = append(fields, in)
			continue
		}
		if f.Kind == acp.FieldText {
			if f.MaxLength == nil || *f.MaxLength > 100 {
				in.Multiline = true
			}
			if f.MinLength != nil {
				in.MinRunes = min(max(*f.MinLength, 0), lim.FieldRunes)
			}
			if f.MaxLength != nil {
				in.MaxRunes = min(max(*f.MaxLength, 1, in.MinRunes), lim.FieldRunes)
			}
		}
		// The value is shown as it is: the platform sends back what the
		// form shows. Typed ones fit (the platform took them from this
		// form) and the agent's suggestion was checked by
		// questionLayout.
		if v, ok := oq.values[f.Key]; ok {
			in.Value = chat.FieldValue(f, v)
			if strings.Contains(in.Value, "\n") {
				in.Multiline = true
			}
		}
		fields = append(fields, in)
	}
	title := "Answer the agent"
	if oq.req.Schema.Title != "" {
		title = excerpt(oq.req.Schema.Title, formLabelRunes)
	}
	if lim.WholeForms {
		return Form{ID: key + wholeFormSuffix, Title: title, Fields: fields}
	}
	return Form{ID: key + ":modal", Title: title, Fields: fields}
}

// wholeFormSuffix ends the ID of a form whose submission answers its
// question (Limits.WholeForms).
const wholeFormSuffix = ":form"

// wholeField makes in a number, a choice, choices or a yes or no, as f
// asks, showing current; it reports false for a text field, which the
// caller makes as it always does.
func wholeField(in *Field, f *acp.ElicitationField, current any) bool {
	switch f.Kind {
	case acp.FieldNumber, acp.FieldInteger:
		in.Kind, in.Decimal = FieldNumber, f.Kind == acp.FieldNumber
		if current != nil {
			in.Value = chat.FieldValue(f, current)
		}
	case acp.FieldBoolean:
		in.Kind = FieldYesNo
		in.Options = []Option{
			{Label: "Yes", Value: "true", Default: current == true},
			{Label: "No", Value: "false", Default: current == false},
		}
	case acp.FieldSelect, acp.FieldMultiSelect:
		in.Kind = FieldChoice
		chosen, _ := current.([]string)
		for j, o := range f.Options {
			in.Options = append(in.Options, Option{Label: excerpt(o.Label(), 100), Value: strconv.Itoa(j),
				Default: current == o.Value || slices.Contains(chosen, o.Value)})
		}
		if f.Kind == acp.FieldMultiSelect {
			in.Kind = FieldChoices
			in.Min, in.Max = 0, len(f.Options)
			if f.MinItems != nil {
				in.Min = min(max(*f.MinItems, 0), in.Max)
			}
			if f.MaxItems != nil {
				in.Max = max(min(*f.MaxItems, in.Max), 1)
			}
			in.Min = min(in.Min, in.Max)
		}
	default:
		return false
	}
	return true
}

// Answer takes a form a user filled in: each value is checked and kept;
// the user is told privately what was kept and what was not, and
// nothing typed is shown to anyone else. It does not block.
func (s *Server) Answer(f FormAnswer) {
	s.event(f.Reply, func() { s.onFormAnswer(f) })
}

func (s *Server) onFormAnswer(fa FormAnswer) {
	if key, ok := strings.CutSuffix(fa.Form, wholeFormSuffix); ok && strings.HasPrefix(key, questionPrefix) {
		s.onWholeForm(key, fa)
		return
	}
	key, ok := strings.CutSuffix(fa.Form, ":modal")
	if !ok || !strings.HasPrefix(key, questionPrefix) {
		s.tell(fa.Reply, "This form is no longer open.")
		return
	}
	oq := s.claimQuestion(fa.Reply, key, fa.From)
	if oq == nil {
		return
	}
	var saved, problems []string
	for _, idx := range oq.texts {
		value, ok := fa.Values[strconv.Itoa(idx)]
		if !ok {
			continue
		}
		f := &oq.req.Schema.Fields[idx]
		if strings.TrimSpace(value) == "" {
			delete(oq.values, f.Key)
			continue
		}
		v, err := f.Parse(value)
		if err != nil {
			problems = append(problems, "**"+oneLine(f.Label(), 80)+"**: "+err.Error())
			continue
		}
		oq.values[f.Key] = v
		saved = append(saved, "**"+oneLine(f.Label(), 80)+"**")
	}
	s.mu.Unlock()
	var b strings.Builder
	if len(saved) > 0 {
		b.WriteString("Saved " + strings.Join(saved, ", ") + ".")
	}
	if len(problems) > 0 {
		b.WriteString("\nNot saved — " + strings.Join(problems, "; ") + ". Use **✏️ Fill in** again.")
	}
	b.WriteString("\nPress **Submit** on the question when it is complete.")
	s.tell(fa.Reply, strings.TrimSpace(b.String()))
}

// onWholeForm takes a whole form's answer (Limits.WholeForms): every
// field is read and checked; what is wrong is shown by field in the
// form, kept open, where the platform can (FormErrors), else told to the
// user in words; a good answer answers the question, as Submit does.
func (s *Server) onWholeForm(key string, fa FormAnswer) {
	oq := s.claimQuestion(fa.Reply, key, fa.From)
	if oq == nil {
		return
	}
	content := map[string]any{}
	problems := map[string]string{}
	for _, idx := range oq.texts {
		f := &oq.req.Schema.Fields[idx]
		id := strconv.Itoa(idx)
		switch f.Kind {
		case acp.FieldBoolean:
			if c := fa.Choices[id]; len(c) > 0 {
				content[f.Key] = c[0] == "true"
			}
		case acp.FieldSelect, acp.FieldMultiSelect:
			var chosen []string
			for _, v := range fa.Choices[id] {
				j, err := strconv.Atoi(v)
				if err != nil || j < 0 || j >= len(f.Options) {
					problems[id] = "That is not one of the choices."
					break
				}
				chosen = append(chosen, f.Options[j].Value)
			}
			switch {
			case len(chosen) == 0:
			case f.Kind == acp.FieldMultiSelect:
				content[f.Key] = chosen
			default:
				content[f.Key] = chosen[0]
			}
		default:
			value := fa.Values[id]
			if strings.TrimSpace(value) == "" {
				break
			}
			v, err := f.Parse(value)
			if err != nil {
				problems[id] = sentence(err.Error())
				continue
			}
			content[f.Key] = v
		}
		if problems[id] != "" {
			continue
		}
		if v, ok := content[f.Key]; !ok && f.Required {
			problems[id] = "This is needed."
		} else if ok {
			if err := f.Check(v); err != nil {
				problems[id] = sentence(err.Error())
			}
		}
	}
	if len(problems) > 0 {
		s.mu.Unlock()
		if fe, ok := fa.Reply.(FormErrors); ok && fe.Invalid(s.ctx, problems) {
			return
		}
		var list []string
		for _, idx := range oq.texts {
			if p := problems[strconv.Itoa(idx)]; p != "" {
				list = append(list, "**"+oneLine(oq.req.Schema.Fields[idx].Label(), 80)+"**: "+p)
			}
		}
		s.tell(fa.Reply, "The answer was not sent — "+strings.Join(list, " ")+" Use **✏️ Answer** again.")
		return
	}
	s.answerQuestion(Click{Where: oq.thread, Action: key, From: fa.From, Reply: fa.Reply}, key, oq,
		acp.ElicitationResult{Action: acp.ActionAccept, Content: content})
}

// sentence is a checker's phrase ("at least 3 characters") as a
// sentence.
func sentence(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	s = strings.ToUpper(string(r)) + s[n:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}
