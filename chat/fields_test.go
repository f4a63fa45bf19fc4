package chat

import (
	"testing"

	"acpbroker/acp"
)

// What a question's field takes, and a value of it, are told in words
// here, in chat: acp hands over the field as data.
func TestFieldHintAndValue_SayWhatAFieldTakesInWords(t *testing.T) {
	one, ten := 1.0, 10.0
	colours := []acp.ElicitationOption{{Value: "r", Title: "red"}, {Value: "g", Title: "green"}}
	for _, tc := range []struct {
		field acp.ElicitationField
		hint  string
		value any
		shown string
	}{
		{acp.ElicitationField{Kind: acp.FieldInteger, Minimum: &one, Maximum: &ten}, "a whole number from 1 to 10", int64(7), "7"},
		{acp.ElicitationField{Kind: acp.FieldNumber, Minimum: &one}, "a number, at least 1", 2.5, "2.5"},
		{acp.ElicitationField{Kind: acp.FieldText, Format: "email"}, "text (email)", "a@b.c", "a@b.c"},
		{acp.ElicitationField{Kind: acp.FieldBoolean}, "yes or no", false, "no"},
		{acp.ElicitationField{Kind: acp.FieldSelect, Options: colours}, "one of: red, green", "g", "green"},
		{acp.ElicitationField{Kind: acp.FieldMultiSelect, Options: colours}, "any of: red, green", []string{"r", "g"}, "red, green"},
	} {
		if got := FieldHint(&tc.field); got != tc.hint {
			t.Errorf("FieldHint(%v) = %q, want %q", tc.field.Kind, got, tc.hint)
		}
		if got := FieldValue(&tc.field, tc.value); got != tc.shown {
			t.Errorf("FieldValue(%v, %v) = %q, want %q", tc.field.Kind, tc.value, got, tc.shown)
		}
	}
}
