package console

import (
	"fmt"
	"strconv"
	"strings"

	"acpbroker/chat/thread"
)

// filling is a form being filled in at the terminal, a field a line:
// Enter keeps a field's value shown (the agent's default) or leaves out
// one that is not required; /decline declines the question.
type filling struct {
	f       thread.Form
	r       *reply
	i       int    // the field being asked
	decline string // the question's Decline button ("": none)
	values  map[string]string
	choices map[string][]string
}

// openForm starts filling in f, which a click r answers opened.
func (c *Console) openForm(f thread.Form, r *reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fl := &filling{f: f, r: r, values: map[string]string{}, choices: map[string][]string{}}
	if m := c.msgs[r.clicked]; m != nil {
		for _, a := range m.actions {
			if a.Style == thread.Danger && a.URL == "" && a.Menu == nil {
				fl.decline = a.ID
			}
		}
	}
	c.form = fl
	c.term.write(fmt.Sprintf("[%s: one answer a line; Enter keeps the value shown or leaves a field out; /decline declines]\n", f.Title))
	c.term.write(fieldPrompt(f.Fields[0]))
}

// fill gives line to the form being filled in; false if there is none.
func (c *Console) fill(raw string) bool {
	c.mu.Lock()
	fl := c.form
	if fl == nil {
		c.mu.Unlock()
		return false
	}
	line := strings.TrimSpace(raw)
	if line == "/decline" {
		c.form = nil
		c.mu.Unlock()
		if fl.decline != "" {
			c.srv.Click(thread.Click{Where: fl.r.where, Action: fl.decline, From: c.user, Reply: fl.r})
		}
		return true
	}
	f := fl.f.Fields[fl.i]
	if problem := fl.take(f, line); problem != "" {
		c.term.write(problem + "; " + fieldPrompt(f))
		c.mu.Unlock()
		return true
	}
	if fl.i++; fl.i < len(fl.f.Fields) {
		c.term.write(fieldPrompt(fl.f.Fields[fl.i]))
		c.mu.Unlock()
		return true
	}
	c.form = nil
	c.mu.Unlock()
	c.srv.Answer(thread.FormAnswer{Form: fl.f.ID, Values: fl.values, Choices: fl.choices, From: c.user, Reply: fl.r})
	return true
}

// take takes line as f's value, or says what is wrong with it.
func (fl *filling) take(f thread.Field, line string) (problem string) {
	if line == "" {
		switch {
		case f.Value != "":
			fl.values[f.ID] = f.Value
		case defaults(f) != nil:
			fl.choices[f.ID] = defaults(f)
		case f.Required:
			return f.Label + " is required"
		}
		return ""
	}
	switch f.Kind {
	case thread.FieldText:
		fl.values[f.ID] = line
	case thread.FieldNumber:
		if f.Decimal {
			if _, err := strconv.ParseFloat(line, 64); err != nil {
				return fmt.Sprintf("%q is not a number", line)
			}
		} else if _, err := strconv.ParseInt(line, 10, 64); err != nil {
			return fmt.Sprintf("%q is not a whole number", line)
		}
		fl.values[f.ID] = line
	case thread.FieldYesNo:
		switch strings.ToLower(line) {
		case "yes", "y", "true":
			fl.choices[f.ID] = []string{"true"}
		case "no", "n", "false":
			fl.choices[f.ID] = []string{"false"}
		default:
			return "yes or no"
		}
	case thread.FieldChoice, thread.FieldChoices:
		var chosen []string
		for _, w := range strings.Split(line, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 || n > len(f.Options) {
				return fmt.Sprintf("a number from 1 to %d", len(f.Options))
			}
			chosen = append(chosen, f.Options[n-1].Value)
		}
		switch {
		case f.Kind == thread.FieldChoice && len(chosen) > 1:
			return "one number"
		case f.Kind == thread.FieldChoices && (len(chosen) < f.Min || f.Max > 0 && len(chosen) > f.Max):
			return fmt.Sprintf("from %d to %d numbers", f.Min, f.Max)
		}
		fl.choices[f.ID] = chosen
	}
	return ""
}

// defaults are the values of f's options shown chosen.
func defaults(f thread.Field) []string {
	var out []string
	for _, o := range f.Options {
		if o.Default {
			out = append(out, o.Value)
		}
	}
	return out
}

// fieldPrompt asks for f's value, on the line the answer is typed on.
func fieldPrompt(f thread.Field) string {
	p := f.Label
	switch f.Kind {
	case thread.FieldChoice, thread.FieldChoices:
		var opts []string
		for j, o := range f.Options {
			opts = append(opts, fmt.Sprintf("%d) %s", j+1, o.Label))
		}
		p += " [" + strings.Join(opts, ", ") + "]"
		if f.Kind == thread.FieldChoices {
			p += " (numbers, comma-separated)"
		}
	case thread.FieldYesNo:
		p += " (yes or no)"
	}
	if f.Required {
		p += " (required)"
	}
	shown := f.Value
	var labels []string
	for _, o := range f.Options {
		if o.Default {
			labels = append(labels, o.Label)
		}
	}
	if len(labels) > 0 {
		shown = strings.Join(labels, ", ")
	}
	if shown != "" {
		p += " [default: " + shown + "]"
	}
	return p + ": "
}
