package slack

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"acpbroker/chat"
	"acpbroker/chat/thread"

	slackapi "github.com/slack-go/slack"
)

// Slack's bounds on what a message and a modal hold.
const (
	maxBlocks       = 50   // blocks of a message
	sectionRunes    = 3000 // a section's text, a context element's
	fallbackRunes   = 3000 // the text shown in notifications
	buttonRunes     = 75   // a button's text
	optionRunes     = 75   // a menu option's text
	optionValueMax  = 150  // a menu option's value
	placeholderMax  = 150  // a menu's or an input's placeholder
	actionElements  = 25   // elements of one actions block
	modalTitleRunes = 24   // a modal's title, its submit and close
	inputLabelRunes = 2000 // an input's label
	inputRunes      = 3000 // a plain_text_input's min and max length
	blockIDRunes    = 255
	metadataMax     = 3000 // a modal's private_metadata
)

// blocks renders a view's text and actions as Block Kit blocks, and the
// text Slack shows where blocks are not (a notification): the text in
// sections of mrkdwn (at most 3,000 characters each, a code block open
// at a cut closed there and opened again), its small print in context
// blocks, then a menu an actions block of its own and the buttons one
// together. Each actions block's id names where (a thread or a
// channel), so that a click on a message shown to one user alone is
// known to be that thread's.
func blocks(text string, actions []thread.Action, where string) ([]slackapi.Block, string) {
	var out []slackapi.Block
	room := maxBlocks - actionBlocks(actions)
	if out = textBlocks(text, true); len(out) > room {
		// Small print between every other line would take a block each:
		// it goes in the sections, as any line, instead.
		out = textBlocks(text, false)
		if len(out) > room {
			out = out[:max(room, 0)]
		}
	}
	var buttons []slackapi.BlockElement
	n := 0
	blockID := func() string {
		n++
		id := "w|" + where + "|" + strconv.Itoa(n)
		if utf8.RuneCountInString(id) > blockIDRunes {
			id = "a|" + strconv.Itoa(n)
		}
		return id
	}
	flush := func() {
		if len(buttons) > 0 {
			out = append(out, slackapi.NewActionBlock(blockID(), buttons...))
			buttons = nil
		}
	}
	for i, a := range actions {
		if a.Menu != nil {
			if el := menu(a); el != nil {
				flush()
				out = append(out, slackapi.NewActionBlock(blockID(), el))
			}
			continue
		}
		if len(buttons) == actionElements {
			flush()
		}
		buttons = append(buttons, button(a, i))
	}
	flush()
	fallback := cutRunes(strings.TrimSpace(mrkdwn(text)), fallbackRunes)
	if fallback == "" {
		fallback = " "
	}
	return out, fallback
}

// actionBlocks is how many blocks actions take.
func actionBlocks(actions []thread.Action) int {
	n, buttons := 0, 0
	for _, a := range actions {
		if a.Menu != nil {
			n++
			buttons = 0
			continue
		}
		if buttons%actionElements == 0 {
			n++
		}
		buttons++
	}
	return n
}

// textBlocks renders text as sections and, with small, its "-# " lines
// (outside code blocks) as context blocks; lines with nothing to show
// are left out.
func textBlocks(text string, small bool) []slackapi.Block {
	type segment struct {
		small bool
		lines []string
	}
	var segs []segment
	fence := false
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(line)
		isSmall := false
		if strings.HasPrefix(trimmed, "```") && (fence || strings.Count(trimmed, "```") == 1) {
			fence = !fence
		} else if !fence && small && strings.HasPrefix(line, "-# ") {
			isSmall, line = true, line[3:]
		}
		if n := len(segs); n > 0 && segs[n-1].small == isSmall {
			segs[n-1].lines = append(segs[n-1].lines, line)
			continue
		}
		segs = append(segs, segment{small: isSmall, lines: []string{line}})
	}
	var out []slackapi.Block
	for _, s := range segs {
		md := strings.Join(s.lines, "\n")
		if s.small {
			for _, piece := range chat.Split(mrkdwn(md), sectionRunes) {
				if strings.TrimSpace(piece) != "" {
					out = append(out, slackapi.NewContextBlock("", slackapi.NewTextBlockObject(slackapi.MarkdownType, piece, false, false)))
				}
			}
			continue
		}
		md = strings.Trim(md, "\n")
		for _, piece := range chat.Split(mrkdwn(md), sectionRunes) {
			if strings.Count(piece, "```")%2 != 0 {
				piece += "\n```" // a code block the text leaves open (Split keeps room)
			}
			if strings.TrimSpace(piece) != "" {
				out = append(out, slackapi.NewSectionBlock(slackapi.NewTextBlockObject(slackapi.MarkdownType, piece, false, false), nil, nil))
			}
		}
	}
	return out
}

// button is an action as a button: its text cut to Slack's 75
// characters, a link button when it has a URL.
func button(a thread.Action, i int) *slackapi.ButtonBlockElement {
	text := slackapi.NewTextBlockObject(slackapi.PlainTextType, label(a.Label, buttonRunes), true, false)
	if a.URL != "" {
		b := slackapi.NewButtonBlockElement(linkPrefix+strconv.Itoa(i), "", text)
		b.URL = a.URL
		return b
	}
	b := slackapi.NewButtonBlockElement(a.ID, "", text)
	switch a.Style {
	case thread.Success, thread.Primary:
		b.Style = slackapi.StylePrimary
	case thread.Danger:
		b.Style = slackapi.StyleDanger
	}
	return b
}

// linkPrefix starts the action id of a link button, whose clicks Slack
// reports too, and which need nothing but the acknowledgement.
const linkPrefix = "link|"

// menu is an action's menu as a static select, or a multi-select when
// more than one may be chosen; options whose value Slack cannot hold are
// left out (nil when none is left).
func menu(a thread.Action) slackapi.BlockElement {
	m := a.Menu
	var opts, chosen []*slackapi.OptionBlockObject
	for _, o := range m.Options {
		if o.Value == "" || len(o.Value) > optionValueMax || len(opts) == 100 {
			continue
		}
		opt := slackapi.NewOptionBlockObject(o.Value, slackapi.NewTextBlockObject(slackapi.PlainTextType, label(o.Label, optionRunes), true, false), nil)
		opts = append(opts, opt)
		if o.Default {
			chosen = append(chosen, opt)
		}
	}
	if len(opts) == 0 {
		return nil
	}
	var placeholder *slackapi.TextBlockObject
	if p := label(m.Placeholder, placeholderMax); p != "" {
		placeholder = slackapi.NewTextBlockObject(slackapi.PlainTextType, p, true, false)
	}
	if m.Max > 1 {
		el := slackapi.NewOptionsMultiSelectBlockElement(slackapi.MultiOptTypeStatic, placeholder, a.ID, opts...)
		el.InitialOptions = chosen
		most := min(m.Max, len(opts))
		el.MaxSelectedItems = &most
		return el
	}
	el := slackapi.NewOptionsSelectBlockElement(slackapi.OptTypeStatic, placeholder, a.ID, opts...)
	if len(chosen) > 0 {
		el.InitialOption = chosen[0]
	}
	return el
}

// label is s on one line, cut to n characters ("…" last when cut).
func label(s string, n int) string {
	return cutRunes(strings.Join(strings.Fields(s), " "), n)
}

// cutRunes cuts s to at most n characters, "…" last when it was cut.
func cutRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// formMeta is what a modal carries back in its private_metadata: where
// its answer is told.
type formMeta struct {
	Where    string `json:"w"`
	Channel  string `json:"c"`
	ThreadTS string `json:"t,omitempty"`
	// Message is the message whose button opened the modal (the
	// question), which its answer changes.
	Message string `json:"m,omitempty"`
}

// checkboxesMax is the most options a checkboxes element holds; a
// choice of more is a multi-select menu.
const checkboxesMax = 10

// modal renders a form as a modal, an input per field: a plain text
// input, a number input, a select menu for a choice, checkboxes (or a
// multi-select menu, past 10 options) for choices, radio buttons for a
// yes or no; the title cut to Slack's 24 characters.
func modal(f thread.Form, meta formMeta) slackapi.ModalViewRequest {
	title := label(f.Title, modalTitleRunes)
	if title == "" {
		title = "Answer"
	}
	var set []slackapi.Block
	for _, fl := range f.Fields {
		name := label(fl.Label, inputLabelRunes)
		if name == "" {
			name = fl.ID
		}
		b := slackapi.NewInputBlock(fieldBlock+fl.ID, slackapi.NewTextBlockObject(slackapi.PlainTextType, name, false, false), nil, input(fl))
		b.Optional = !fl.Required
		set = append(set, b)
	}
	raw, _ := json.Marshal(meta)
	m := string(raw)
	if len(m) > metadataMax {
		m = ""
	}
	return slackapi.ModalViewRequest{
		Type:            slackapi.VTModal,
		Title:           slackapi.NewTextBlockObject(slackapi.PlainTextType, title, false, false),
		Submit:          slackapi.NewTextBlockObject(slackapi.PlainTextType, "Submit", false, false),
		Close:           slackapi.NewTextBlockObject(slackapi.PlainTextType, "Cancel", false, false),
		Blocks:          slackapi.Blocks{BlockSet: set},
		CallbackID:      f.ID,
		PrivateMetadata: m,
	}
}

// input is a form's field as a modal's input element.
func input(fl thread.Field) slackapi.BlockElement {
	var placeholder *slackapi.TextBlockObject
	if p := label(fl.Placeholder, placeholderMax); p != "" {
		placeholder = slackapi.NewTextBlockObject(slackapi.PlainTextType, p, false, false)
	}
	var opts, chosen []*slackapi.OptionBlockObject
	for _, o := range fl.Options {
		if o.Value == "" || len(o.Value) > optionValueMax || len(opts) == 100 {
			continue
		}
		opt := slackapi.NewOptionBlockObject(o.Value, slackapi.NewTextBlockObject(slackapi.PlainTextType, label(o.Label, optionRunes), false, false), nil)
		opts = append(opts, opt)
		if o.Default {
			chosen = append(chosen, opt)
		}
	}
	switch fl.Kind {
	case thread.FieldNumber:
		in := slackapi.NewNumberInputBlockElement(placeholder, fl.ID, fl.Decimal)
		in.InitialValue = fl.Value
		return in
	case thread.FieldYesNo:
		in := slackapi.NewRadioButtonsBlockElement(fl.ID, opts...)
		if len(chosen) > 0 {
			in.InitialOption = chosen[0]
		}
		return in
	case thread.FieldChoice:
		in := slackapi.NewOptionsSelectBlockElement(slackapi.OptTypeStatic, placeholder, fl.ID, opts...)
		if len(chosen) > 0 {
			in.InitialOption = chosen[0]
		}
		return in
	case thread.FieldChoices:
		if len(opts) <= checkboxesMax {
			in := slackapi.NewCheckboxGroupsBlockElement(fl.ID, opts...)
			in.InitialOptions = chosen
			return in
		}
		in := slackapi.NewOptionsMultiSelectBlockElement(slackapi.MultiOptTypeStatic, placeholder, fl.ID, opts...)
		in.InitialOptions = chosen
		if fl.Max > 0 {
			most := min(fl.Max, len(opts))
			in.MaxSelectedItems = &most
		}
		return in
	}
	in := slackapi.NewPlainTextInputBlockElement(placeholder, fl.ID)
	in.Multiline = fl.Multiline
	in.InitialValue = fl.Value
	in.MinLength = min(fl.MinRunes, inputRunes)
	in.MaxLength = min(fl.MaxRunes, inputRunes)
	return in
}

// fieldBlock starts the block id of a modal's input.
const fieldBlock = "f|"

// The metadata the app's messages carry: its event type, and in its
// payload whether the message is of a conversation thread, whether it
// shows how a turn ended, and who gave the command it answers.
const (
	metaEvent   = "acp_broker"
	metaThread  = "thread"
	metaOutcome = "outcome"
	metaBy      = "by"
)
