package fakeslack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// problem is one Block Kit error: what is wrong and where, as Slack
// reports it ("must be less than 3001 characters
// [json-pointer:/blocks/0/text/text]").
type problem struct{ msg, ptr string }

func (p problem) String() string { return p.msg + " [json-pointer:" + p.ptr + "]" }

// surface is where blocks are shown.
type surface int

const (
	surfMessage surface = iota
	surfModal
	surfStream // the blocks of a streaming chunk
)

var (
	messageBlocks = set("section", "divider", "image", "actions", "context", "header", "input",
		"rich_text", "markdown", "file", "video", "table", "context_actions", "call")
	modalBlocks  = set("section", "divider", "image", "actions", "context", "header", "input", "rich_text", "video")
	streamBlocks = set("section", "divider", "image", "actions", "context", "header", "rich_text", "markdown",
		"table", "context_actions", "alert", "card", "carousel", "plan", "task_card")
	elementTypes = set("button", "checkboxes", "datepicker", "datetimepicker", "timepicker", "image",
		"overflow", "radio_buttons", "plain_text_input", "number_input", "email_text_input", "url_text_input",
		"rich_text_input", "file_input", "static_select", "external_select", "users_select",
		"conversations_select", "channels_select", "multi_static_select", "multi_external_select",
		"multi_users_select", "multi_conversations_select", "multi_channels_select", "workflow_button",
		"feedback_buttons", "icon_button")
)

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// checker collects the problems of a Block Kit payload.
type checker struct {
	problems []problem
	blockIDs map[string]bool
}

func (k *checker) add(ptr, format string, args ...any) {
	if len(k.problems) < 20 {
		k.problems = append(k.problems, problem{fmt.Sprintf(format, args...), ptr})
	}
}

func chars(s string) int { return utf8.RuneCountInString(s) }

// maxLen checks a string field's length.
func (k *checker) maxLen(o map[string]any, field, ptr string, n int) {
	if v, ok := o[field].(string); ok && chars(v) > n {
		k.add(ptr+"/"+field, "must be less than %d characters", n+1)
	}
}

// checkBlocks decodes and checks a blocks array for a surface. formatOK
// is false when raw is not an array of objects; the blocks come back
// each as its JSON.
func checkBlocks(raw json.RawMessage, ptr string, maxBlocks int, surf surface) (blocks []json.RawMessage, problems []problem, formatOK bool) {
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, nil, false
	}
	k := &checker{blockIDs: map[string]bool{}}
	if len(blocks) > maxBlocks {
		k.add(ptr, "no more than %d items allowed", maxBlocks)
	}
	for i, b := range blocks {
		var o map[string]any
		if json.Unmarshal(b, &o) != nil || o == nil {
			return nil, nil, false
		}
		k.block(o, ptr+"/"+strconv.Itoa(i), surf)
	}
	return blocks, k.problems, true
}

func (k *checker) block(o map[string]any, ptr string, surf surface) {
	typ, _ := o["type"].(string)
	allowed := map[surface]map[string]bool{surfMessage: messageBlocks, surfModal: modalBlocks, surfStream: streamBlocks}[surf]
	if !allowed[typ] {
		k.add(ptr+"/type", "unsupported type: %s", typ)
		return
	}
	if id, ok := o["block_id"].(string); ok {
		switch {
		case chars(id) > 255:
			k.add(ptr+"/block_id", "must be less than 256 characters")
		case k.blockIDs[id]:
			k.add(ptr+"/block_id", "duplicate block_id")
		}
		k.blockIDs[id] = true
	}
	switch typ {
	case "section":
		text, hasText := o["text"].(map[string]any)
		fields, hasFields := o["fields"].([]any)
		if !hasText && !hasFields {
			k.add(ptr, "must provide either text or fields")
		}
		if hasText {
			k.text(text, ptr+"/text", false, 3000)
		}
		if len(fields) > 10 {
			k.add(ptr+"/fields", "no more than 10 items allowed")
		}
		for i, f := range fields {
			if fo, ok := f.(map[string]any); ok {
				k.text(fo, fmt.Sprintf("%s/fields/%d", ptr, i), false, 2000)
			}
		}
		if acc, ok := o["accessory"].(map[string]any); ok {
			k.element(acc, ptr+"/accessory", nil)
		}
	case "header":
		k.requiredText(o, "text", ptr, true, 150)
	case "context":
		els, _ := o["elements"].([]any)
		if len(els) == 0 || len(els) > 10 {
			k.add(ptr+"/elements", "must have between 1 and 10 items")
		}
		for i, e := range els {
			eo, _ := e.(map[string]any)
			p := fmt.Sprintf("%s/elements/%d", ptr, i)
			switch eo["type"] {
			case "plain_text", "mrkdwn":
				k.text(eo, p, false, 3000)
			case "image":
				k.element(eo, p, nil)
			default:
				k.add(p+"/type", "unsupported type: %v", eo["type"])
			}
		}
	case "actions":
		els, _ := o["elements"].([]any)
		if len(els) == 0 || len(els) > 25 {
			k.add(ptr+"/elements", "must have between 1 and 25 items")
		}
		ids := map[string]bool{}
		for i, e := range els {
			if eo, ok := e.(map[string]any); ok {
				k.element(eo, fmt.Sprintf("%s/elements/%d", ptr, i), ids)
			}
		}
	case "image":
		_, url := o["image_url"].(string)
		_, file := o["slack_file"].(map[string]any)
		if !url && !file {
			k.add(ptr, "must provide either image_url or slack_file")
		}
		k.maxLen(o, "image_url", ptr, 3000)
		if _, ok := o["alt_text"].(string); !ok {
			k.add(ptr+"/alt_text", "missing required field: alt_text")
		}
		k.maxLen(o, "alt_text", ptr, 2000)
		if t, ok := o["title"].(map[string]any); ok {
			k.text(t, ptr+"/title", true, 2000)
		}
	case "input":
		k.requiredText(o, "label", ptr, true, 2000)
		if h, ok := o["hint"].(map[string]any); ok {
			k.text(h, ptr+"/hint", true, 2000)
		}
		el, ok := o["element"].(map[string]any)
		if !ok {
			k.add(ptr+"/element", "missing required field: element")
		} else {
			k.element(el, ptr+"/element", nil)
		}
	case "markdown":
		if _, ok := o["text"].(string); !ok {
			k.add(ptr+"/text", "missing required field: text")
		}
		k.maxLen(o, "text", ptr, 12000)
	case "rich_text":
		if _, ok := o["elements"].([]any); !ok {
			k.add(ptr+"/elements", "missing required field: elements")
		}
	}
}

// requiredText checks a text object field that must be there.
func (k *checker) requiredText(o map[string]any, field, ptr string, plain bool, n int) {
	t, ok := o[field].(map[string]any)
	if !ok {
		k.add(ptr+"/"+field, "missing required field: %s", field)
		return
	}
	k.text(t, ptr+"/"+field, plain, n)
}

// text checks a text object: its type (plain_text only if plain), and
// its text, present and at most n characters.
func (k *checker) text(o map[string]any, ptr string, plain bool, n int) {
	typ, _ := o["type"].(string)
	switch {
	case typ != "plain_text" && typ != "mrkdwn":
		k.add(ptr+"/type", "must be a valid enum value")
	case plain && typ != "plain_text":
		k.add(ptr+"/type", "must be plain_text")
	}
	s, ok := o["text"].(string)
	switch {
	case !ok:
		k.add(ptr+"/text", "missing required field: text")
	case s == "":
		k.add(ptr+"/text", "must be more than 0 characters")
	case chars(s) > n:
		k.add(ptr+"/text", "must be less than %d characters", n+1)
	}
}

// element checks an interactive element; ids, when given, are the
// action_ids of its block so far.
func (k *checker) element(o map[string]any, ptr string, ids map[string]bool) {
	typ, _ := o["type"].(string)
	if !elementTypes[typ] {
		k.add(ptr+"/type", "unsupported type: %s", typ)
		return
	}
	if id, ok := o["action_id"].(string); ok {
		if chars(id) > 255 {
			k.add(ptr+"/action_id", "must be less than 256 characters")
		}
		if ids != nil && ids[id] {
			k.add(ptr+"/action_id", "duplicate action_id")
		}
		if ids != nil {
			ids[id] = true
		}
	}
	if p, ok := o["placeholder"].(map[string]any); ok {
		k.text(p, ptr+"/placeholder", true, 150)
	}
	switch typ {
	case "button":
		k.requiredText(o, "text", ptr, true, 75)
		k.maxLen(o, "value", ptr, 2000)
		k.maxLen(o, "url", ptr, 3000)
		if st, ok := o["style"].(string); ok && st != "primary" && st != "danger" {
			k.add(ptr+"/style", "must be a valid enum value")
		}
	case "static_select", "multi_static_select":
		opts, hasOpts := o["options"].([]any)
		groups, hasGroups := o["option_groups"].([]any)
		if !hasOpts && !hasGroups {
			k.add(ptr, "must provide either options or option_groups")
		}
		k.options(opts, ptr+"/options", 100)
		if len(groups) > 100 {
			k.add(ptr+"/option_groups", "no more than 100 items allowed")
		}
		for i, g := range groups {
			if gm, ok := g.(map[string]any); ok {
				gopts, _ := gm["options"].([]any)
				k.options(gopts, fmt.Sprintf("%s/option_groups/%d/options", ptr, i), 100)
			}
		}
	case "overflow":
		opts, _ := o["options"].([]any)
		if len(opts) == 0 {
			k.add(ptr+"/options", "must have between 1 and 5 items")
		}
		k.options(opts, ptr+"/options", 5)
	case "radio_buttons", "checkboxes":
		opts, _ := o["options"].([]any)
		k.options(opts, ptr+"/options", 10)
	case "plain_text_input":
		for _, f := range []string{"max_length", "min_length"} {
			if v, ok := o[f].(float64); ok && v > 3000 {
				k.add(ptr+"/"+f, "must be less than 3001")
			}
		}
	case "image":
		k.maxLen(o, "alt_text", ptr, 2000)
	}
}

// options checks the options of a menu: at most n, each with its text
// (75) and value (150).
func (k *checker) options(opts []any, ptr string, n int) {
	if len(opts) > n {
		k.add(ptr, "no more than %d items allowed", n)
	}
	for i, op := range opts {
		om, ok := op.(map[string]any)
		p := fmt.Sprintf("%s/%d", ptr, i)
		if !ok {
			k.add(p, "must be an object")
			continue
		}
		k.requiredText(om, "text", p, false, 75)
		k.maxLen(om, "value", p, 150)
		if d, ok := om["description"].(map[string]any); ok {
			k.text(d, p+"/description", false, 75)
		}
	}
}

// checkView checks a modal view object as views.open, views.push and
// views.update receive it.
func checkView(o map[string]any) []problem {
	k := &checker{blockIDs: map[string]bool{}}
	if t, _ := o["type"].(string); t != "modal" {
		k.add("/view/type", "must be a valid enum value")
	}
	k.requiredText(o, "title", "/view", true, 24)
	hasInput := false
	blocks, ok := o["blocks"].([]any)
	if !ok {
		k.add("/view/blocks", "missing required field: blocks")
	}
	if len(blocks) > 100 {
		k.add("/view/blocks", "no more than 100 items allowed")
	}
	for i, b := range blocks {
		bo, ok := b.(map[string]any)
		if !ok {
			k.add(fmt.Sprintf("/view/blocks/%d", i), "must be an object")
			continue
		}
		hasInput = hasInput || bo["type"] == "input"
		k.block(bo, fmt.Sprintf("/view/blocks/%d", i), surfModal)
	}
	for _, f := range []string{"submit", "close"} {
		if t, ok := o[f].(map[string]any); ok {
			k.text(t, "/view/"+f, true, 24)
		}
	}
	if _, ok := o["submit"].(map[string]any); hasInput && !ok {
		k.add("/view/submit", "must provide submit when the view has input blocks")
	}
	k.maxLen(o, "private_metadata", "/view", 3000)
	k.maxLen(o, "callback_id", "/view", 255)
	k.maxLen(o, "external_id", "/view", 255)
	return k.problems
}

// walkElements calls f on every interactive element of some blocks with
// its block's id and type.
func walkElements(blocks []json.RawMessage, f func(blockID string, el map[string]any)) {
	for _, b := range blocks {
		var o map[string]any
		if json.Unmarshal(b, &o) != nil {
			continue
		}
		id, _ := o["block_id"].(string)
		if acc, ok := o["accessory"].(map[string]any); ok {
			f(id, acc)
		}
		if el, ok := o["element"].(map[string]any); ok {
			f(id, el)
		}
		if els, ok := o["elements"].([]any); ok && o["type"] == "actions" {
			for _, e := range els {
				if eo, ok := e.(map[string]any); ok {
					f(id, eo)
				}
			}
		}
	}
}
