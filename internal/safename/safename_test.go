package safename

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		s     string
		max   int
		empty string
		want  string
	}{
		{"slack:C0123/1700000000.000100", 0, "_", "slack_C0123_1700000000_000100"},
		{"../../etc", 0, "_", "______etc"},
		{"", 0, "_", "_"},
		{"", 64, "agent", "agent"},
		{"é/x", 0, "_", "__x"},
		{strings.Repeat("a", 100), 64, "agent", strings.Repeat("a", 64)},
		{strings.Repeat("a", 100), 0, "_", strings.Repeat("a", 100)},
	} {
		if got := Of(c.s, c.max, c.empty); got != c.want {
			t.Errorf("Of(%q, %d, %q) = %q, want %q", c.s, c.max, c.empty, got, c.want)
		}
	}
}
