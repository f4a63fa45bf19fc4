package console

import (
	"context"
	"fmt"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
)

var _ adapter.Elicitor = (*sink)(nil)

// Elicit puts the agent's question to the local user: a form field by
// field, each answered on its own line (Enter keeps the default or skips
// a field that is not required), or a link to visit, answered "done" or
// "decline". "/decline" declines at any point. The link is printed, never
// opened.
func (s *sink) Elicit(ctx context.Context, req *acp.ElicitationRequest) adapter.ElicitAnswer {
	ch := make(chan string, 1)
	s.c.mu.Lock()
	if s.c.asking != nil {
		s.c.mu.Unlock()
		return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}} // one question at a time
	}
	s.c.asking = ch
	s.c.mu.Unlock()
	defer func() {
		s.c.mu.Lock()
		if s.c.asking == ch {
			s.c.asking = nil
		}
		s.c.mu.Unlock()
	}()
	s.breakLine()
	cancel := adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionCancel}}
	decline := adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionDecline}, By: s.c.user(), ByName: "local user"}
	// next reads the user's next line; false when the question closed.
	next := func() (string, bool) {
		select {
		case <-ctx.Done():
			s.c.printf("\n[question closed: %v]\n", context.Cause(ctx))
			return "", false
		case line, ok := <-ch:
			return strings.TrimSpace(line), ok
		}
	}

	if req.Mode == acp.ElicitURL {
		s.c.printf("\n[question] The agent asks you to open a link: %s\n  %s\n(the broker does not open it)\nType done or decline: ", req.Message, req.URL)
		for {
			line, ok := next()
			switch {
			case !ok:
				return cancel
			case strings.EqualFold(line, "done"):
				s.c.printf("[done]\n")
				return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionAccept}, By: s.c.user(), ByName: "local user"}
			case strings.EqualFold(line, "decline"), line == "/decline":
				s.c.printf("[declined]\n")
				return decline
			}
			s.c.printf("Type done or decline: ")
		}
	}

	s.c.printf("\n[question] The agent asks: %s\n", req.Message)
	for _, f := range req.Schema.Fields {
		note := ""
		if f.Required {
			note = ", required"
		}
		s.c.printf("  %s (%s%s)\n", f.Label(), chat.FieldHint(&f), note)
	}
	s.c.printf("(one answer a line; Enter skips or keeps the default; /decline declines)\n")
	content := map[string]any{}
	for i := range req.Schema.Fields {
		f := &req.Schema.Fields[i]
		def, hasDef := f.DefaultValue()
		prompt := f.Label()
		if f.Kind == acp.FieldSelect || f.Kind == acp.FieldMultiSelect {
			var opts []string
			for j, o := range f.Options {
				opts = append(opts, fmt.Sprintf("%d) %s", j+1, o.Label()))
			}
			prompt += " [" + strings.Join(opts, ", ") + "]"
			if f.Kind == acp.FieldMultiSelect {
				prompt += " (numbers, comma-separated)"
			}
		}
		if hasDef {
			prompt += " [default: " + chat.FieldValue(f, def) + "]"
		}
		s.c.printf("%s: ", prompt)
		for {
			line, ok := next()
			if !ok {
				return cancel
			}
			if line == "/decline" {
				s.c.printf("[declined]\n")
				return decline
			}
			if line == "" {
				if hasDef {
					content[f.Key] = def
					break
				}
				if !f.Required {
					break
				}
				s.c.printf("%s is required: ", f.Label())
				continue
			}
			v, err := f.Parse(line)
			if err != nil {
				s.c.printf("%s; %s: ", err, f.Label())
				continue
			}
			content[f.Key] = v
			break
		}
	}
	var names []string
	for _, f := range req.Schema.Fields {
		if _, ok := content[f.Key]; ok {
			names = append(names, f.Label())
		}
	}
	s.c.printf("[answered: %s]\n", strings.Join(names, ", "))
	return adapter.ElicitAnswer{Result: acp.ElicitationResult{Action: acp.ActionAccept, Content: content}, By: s.c.user(), ByName: "local user"}
}
