package chat

import (
	"fmt"
	"strconv"
	"strings"

	"acpbroker/acp"
)

// FieldValue shows a value of the field's kind in words (a choice by its
// label). For a person's own view only: answers may be secret.
func FieldValue(f *acp.ElicitationField, v any) string {
	label := func(s string) string {
		for _, o := range f.Options {
			if o.Value == s {
				return o.Label()
			}
		}
		return s
	}
	switch x := v.(type) {
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case float64:
		return number(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case []string:
		var parts []string
		for _, s := range x {
			parts = append(parts, label(s))
		}
		return strings.Join(parts, ", ")
	case string:
		return label(x)
	}
	return fmt.Sprint(v)
}

// FieldHint says in a few words what a question's field takes, e.g. "a
// whole number from 1 to 10" or "one of: red, green, blue".
func FieldHint(f *acp.ElicitationField) string {
	bounds := func(lo, hi *float64) string {
		switch {
		case lo != nil && hi != nil:
			return " from " + number(*lo) + " to " + number(*hi)
		case lo != nil:
			return ", at least " + number(*lo)
		case hi != nil:
			return ", at most " + number(*hi)
		}
		return ""
	}
	switch f.Kind {
	case acp.FieldText:
		if f.Format != "" {
			return "text (" + f.Format + ")"
		}
		return "text"
	case acp.FieldNumber:
		return "a number" + bounds(f.Minimum, f.Maximum)
	case acp.FieldInteger:
		return "a whole number" + bounds(f.Minimum, f.Maximum)
	case acp.FieldBoolean:
		return "yes or no"
	case acp.FieldSelect, acp.FieldMultiSelect:
		var labels []string
		for _, o := range f.Options {
			labels = append(labels, o.Label())
		}
		if f.Kind == acp.FieldMultiSelect {
			return "any of: " + strings.Join(labels, ", ")
		}
		return "one of: " + strings.Join(labels, ", ")
	}
	return f.Type
}

// number is x as a person writes it: no exponent, no trailing zeros.
func number(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
