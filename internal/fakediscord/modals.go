package fakediscord

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Modal is a modal the bot opened in answer to an interaction.
type Modal struct {
	CustomID string
	Title    string
	Inputs   []TextInput
}

// TextInput is one text input of a modal.
type TextInput struct {
	CustomID    string
	Label       string
	Style       int // 1 short, 2 paragraph
	Required    bool
	MinLength   int
	MaxLength   int // 0: Discord's 4,000
	Value       string
	Placeholder string
}

// parseModal validates the data of a modal response (type 9) as Discord
// does and returns the modal.
func parseModal(data map[string]json.RawMessage) (*Modal, int, any, bool) {
	fail := func(field, code, msg string) (*Modal, int, any, bool) {
		st, b := formError(field, code, msg)
		return nil, st, b, false
	}
	m := &Modal{CustomID: str(data, "custom_id"), Title: str(data, "title")}
	rows := raws(data, "components")
	switch {
	case m.CustomID == "" || m.Title == "" || len(rows) == 0:
		return fail("data", "BASE_TYPE_REQUIRED", "A modal needs a custom_id, a title and components.")
	case utf8.RuneCountInString(m.CustomID) > 100:
		return fail("data.custom_id", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
	case utf8.RuneCountInString(m.Title) > 45:
		return fail("data.title", "BASE_TYPE_MAX_LENGTH", "Must be 45 or fewer in length.")
	case len(rows) > 5:
		return fail("data.components", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 5 in length.")
	}
	seen := map[string]bool{}
	for i, r := range rows {
		row := object(r)
		pre := "data.components." + strconv.Itoa(i)
		children := raws(row, "components")
		if integer(row, "type") != 1 || len(children) != 1 {
			return fail(pre, "UNION_TYPE_CHOICES", "A modal row is an action row with one text input.")
		}
		co := object(children[0])
		cp := pre + ".components.0"
		in := TextInput{CustomID: str(co, "custom_id"), Label: str(co, "label"), Style: integer(co, "style"),
			MinLength: integer(co, "min_length"), MaxLength: integer(co, "max_length"), Value: str(co, "value"), Placeholder: str(co, "placeholder")}
		in.Required = true
		if v, ok := co["required"]; ok {
			json.Unmarshal(v, &in.Required)
		}
		switch {
		case integer(co, "type") != 4:
			return fail(cp+".type", "UNION_TYPE_CHOICES", "Only text inputs (type 4) are allowed in a modal here.")
		case in.CustomID == "" || utf8.RuneCountInString(in.CustomID) > 100:
			return fail(cp+".custom_id", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
		case seen[in.CustomID]:
			return fail(cp+".custom_id", "COMPONENT_CUSTOM_ID_DUPLICATED", "Component custom id cannot be duplicated")
		case in.Label == "" || utf8.RuneCountInString(in.Label) > 45:
			return fail(cp+".label", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 45 in length.")
		case in.Style != 1 && in.Style != 2:
			return fail(cp+".style", "BASE_TYPE_CHOICES", "Value must be one of {1, 2}.")
		case in.MinLength < 0 || in.MinLength > 4000:
			return fail(cp+".min_length", "NUMBER_TYPE_MAX", "Must be between 0 and 4000.")
		case in.MaxLength < 0 || in.MaxLength > 4000 || in.MaxLength > 0 && in.MaxLength < max(in.MinLength, 1):
			return fail(cp+".max_length", "NUMBER_TYPE_MAX", "Must be between 1 and 4000, and not under min_length.")
		case utf8.RuneCountInString(in.Value) > 4000:
			return fail(cp+".value", "BASE_TYPE_MAX_LENGTH", "Must be 4000 or fewer in length.")
		case utf8.RuneCountInString(in.Placeholder) > 100:
			return fail(cp+".placeholder", "BASE_TYPE_MAX_LENGTH", "Must be 100 or fewer in length.")
		}
		seen[in.CustomID] = true
		m.Inputs = append(m.Inputs, in)
	}
	return m, 0, nil, true
}

// Modal returns the modal the bot opened in answer to an interaction, if
// it did.
func (s *Server) Modal(interactionID string) (Modal, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.interactions[interactionID]
	if in == nil || in.modal == nil {
		return Modal{}, false
	}
	m := *in.modal
	m.Inputs = slices.Clone(m.Inputs)
	return m, true
}

// SubmitModal has userID submit the modal the bot opened in answer to the
// interaction opened, with values by text input custom id (an input left
// out keeps the value it was shown with), and returns the new
// interaction's id (type 5). Only the user the modal was shown to can
// submit it, once; required inputs must be filled and every value must
// fit its input's lengths. Misuse is reported with tb.Errorf and returns
// "".
func (s *Server) SubmitModal(opened, userID string, values map[string]string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	from := s.interactions[opened]
	switch {
	case from == nil || from.modal == nil:
		s.errorf("SubmitModal: interaction %s opened no modal", opened)
		return ""
	case from.UserID != userID:
		s.errorf("SubmitModal: the modal was shown to %s, not %s", from.UserID, userID)
		return ""
	case from.modalDone:
		s.errorf("SubmitModal: the modal of %s was already submitted", opened)
		return ""
	}
	modal := from.modal
	for k := range values {
		if !slices.ContainsFunc(modal.Inputs, func(in TextInput) bool { return in.CustomID == k }) {
			s.errorf("SubmitModal: the modal has no input %q", k)
			return ""
		}
	}
	var rows []any
	submitted := map[string]string{}
	for _, in := range modal.Inputs {
		v, ok := values[in.CustomID]
		if !ok {
			v = in.Value
		}
		n := utf8.RuneCountInString(v)
		limit := in.MaxLength
		if limit == 0 {
			limit = 4000
		}
		switch {
		case in.Required && v == "":
			s.errorf("SubmitModal: input %q is required", in.Label)
			return ""
		case v != "" && (n < in.MinLength || n > limit):
			s.errorf("SubmitModal: input %q takes %d to %d characters, not %d", in.Label, in.MinLength, limit, n)
			return ""
		}
		submitted[in.CustomID] = v
		rows = append(rows, map[string]any{"type": 1, "components": []any{map[string]any{"type": 4, "custom_id": in.CustomID, "value": v}}})
	}
	ch := s.channels[from.ChannelID]
	var m *message
	if from.Type == 3 {
		if m = s.messages[from.MessageID]; m == nil || m.Deleted {
			s.errorf("SubmitModal: the message of the modal's button is gone")
			return ""
		}
	}
	from.modalDone = true
	in := s.newInteractionLocked(5, ch, userID, map[string]any{"custom_id": modal.CustomID, "components": rows}, m)
	in.CustomID = modal.CustomID
	in.ModalValues = submitted
	if m != nil {
		in.MessageID = m.ID
	}
	return in.ID
}

// checkSelect checks values chosen in a select menu against its
// definition: a string select's values must be its options', and their
// number within min_values and max_values (1 and 1 by default).
func checkSelect(m *message, customID string, values []string) error {
	var def map[string]any
	walkComponents(m.Components, func(c map[string]any) {
		if id, _ := c["custom_id"].(string); id == customID && def == nil {
			def = c
		}
	})
	if def == nil {
		return fmt.Errorf("no select menu %q", customID)
	}
	lo, hi := 1, 1
	if v, ok := def["min_values"].(float64); ok {
		lo = int(v)
	}
	if v, ok := def["max_values"].(float64); ok {
		hi = int(v)
	}
	if len(values) < lo || len(values) > hi {
		return fmt.Errorf("select menu %q takes %d to %d values, not %d", customID, lo, hi, len(values))
	}
	if num(def["type"]) != 3 {
		return nil
	}
	var offered []string
	opts, _ := def["options"].([]any)
	for _, o := range opts {
		if om, ok := o.(map[string]any); ok {
			v, _ := om["value"].(string)
			offered = append(offered, v)
		}
	}
	seen := map[string]bool{}
	for _, v := range values {
		if !slices.Contains(offered, v) || seen[v] {
			return fmt.Errorf("select menu %q has no option %q (it has %q)", customID, v, offered)
		}
		seen[v] = true
	}
	return nil
}
