package redact

import "testing"

func TestRedactor_MasksEverySecretAndLeavesTheRest(t *testing.T) {
	r := New("sk-ant-secret-123", "", "abc", "sk-ant-secret-123-long", "Bot.token.xyz")
	for in, want := range map[string]string{
		"error: invalid key sk-ant-secret-123 (twice: sk-ant-secret-123)": "error: invalid key [redacted] (twice: [redacted])",
		"key sk-ant-secret-123-long":                                      "key [redacted]",
		"token Bot.token.xyz at abc":                                      "token [redacted] at abc",
		"nothing secret here":                                             "nothing secret here",
	} {
		if got := r.String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
	var none *Redactor
	if got := none.String("sk-ant-secret-123"); got != "sk-ant-secret-123" {
		t.Errorf("a nil Redactor changed the text: %q", got)
	}
}

// Values added later (a reload's new keys) are masked too, and the
// earlier ones still are.
func TestRedactor_AddKeepsTheEarlierValues(t *testing.T) {
	r := New("first-secret")
	r.Add("second-secret", "x")
	if got := r.String("first-secret second-secret x"); got != Mask+" "+Mask+" x" {
		t.Fatalf("masked = %q", got)
	}
	var z Redactor
	z.Add("zero-value-secret")
	if got := z.String("a zero-value-secret"); got != "a "+Mask {
		t.Fatalf("the zero Redactor after Add masks %q", got)
	}
}
