package fakediscord

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Autocomplete has userID type into the option focused of the chat-input
// command name in channelID, with the other options given so far, and
// returns the interaction's (type 4) id. The focused option must be one
// the command defines with autocomplete; its value is sent as typed (a
// string), the others typed as SlashCommand types them, and required
// options may be missing, as they are while the user types. The bot's
// answer is read with AutocompleteChoices. Misuse is reported with
// tb.Errorf and returns "".
func (s *Server) Autocomplete(channelID, userID, name string, options map[string]any, focused string) string {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.channels[channelID]
	if ch == nil {
		s.errorf("Autocomplete: unknown channel %s", channelID)
		return ""
	}
	cmd := s.findCommandLocked(ch.GuildID, name, 1)
	if cmd == nil {
		cmd = s.findCommandLocked("", name, 1)
	}
	if cmd == nil {
		s.errorf("Autocomplete: /%s is not registered", name)
		return ""
	}
	i := slices.IndexFunc(cmd.Options, func(o CommandOption) bool { return o.Name == focused })
	if i < 0 || !cmd.Options[i].Autocomplete {
		s.errorf("Autocomplete /%s: option %q does not autocomplete", name, focused)
		return ""
	}
	typed, _ := options[focused].(string)
	rest := map[string]any{}
	var defs []CommandOption
	for _, d := range cmd.Options {
		if _, ok := options[d.Name]; ok && d.Name != focused {
			rest[d.Name] = options[d.Name]
		}
		d.Required = false
		defs = append(defs, d)
	}
	resolved := map[string]map[string]any{}
	opts, err := s.commandOptionsLocked(ch, defs, rest, resolved)
	if err != nil {
		s.errorf("Autocomplete /%s: %v", name, err)
		return ""
	}
	opts = append(opts, map[string]any{"name": focused, "type": cmd.Options[i].Type, "value": typed, "focused": true})
	data := map[string]any{"id": cmd.ID, "name": cmd.Name, "type": cmd.Type, "options": opts}
	if cmd.GuildID != "" {
		data["guild_id"] = cmd.GuildID
	}
	in := s.newInteractionLocked(4, ch, userID, data, nil)
	in.Name = name
	return in.ID
}

// CommandChoice is one suggestion of an autocomplete result.
type CommandChoice struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// AutocompleteChoices returns the choices the bot suggested for an
// autocomplete interaction, and whether it answered.
func (s *Server) AutocompleteChoices(interactionID string) ([]CommandChoice, bool) {
	for _, r := range s.InteractionResponses(interactionID) {
		if r.Type == 8 && r.Status/100 == 2 {
			var d struct {
				Choices []CommandChoice `json:"choices"`
			}
			json.Unmarshal(r.Data, &d)
			return d.Choices, true
		}
	}
	return nil, false
}

// checkAutocompleteResult holds an autocomplete result to Discord's
// bounds: at most 25 choices, each named in 1 to 100 characters, with a
// string value of at most 100 characters or a number.
func checkAutocompleteResult(data map[string]json.RawMessage) (int, any, bool) {
	choices := raws(data, "choices")
	if len(choices) > 25 {
		st, b := formError("data.choices", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
		return st, b, false
	}
	for i, r := range choices {
		o := object(r)
		f := "data.choices." + strconv.Itoa(i)
		if n := len([]rune(str(o, "name"))); n < 1 || n > 100 {
			st, b := formError(f+".name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
			return st, b, false
		}
		var v any
		if json.Unmarshal(o["value"], &v) != nil {
			st, b := formError(f+".value", "BASE_TYPE_REQUIRED", "This field is required")
			return st, b, false
		}
		switch v := v.(type) {
		case string:
			if n := len([]rune(v)); n > 100 {
				st, b := formError(f+".value", "BASE_TYPE_BAD_LENGTH", fmt.Sprintf("Must be 100 or fewer in length (%d).", n))
				return st, b, false
			}
		case float64:
		default:
			st, b := formError(f+".value", "BASE_TYPE_REQUIRED", "This field is required")
			return st, b, false
		}
	}
	return 0, nil, true
}
