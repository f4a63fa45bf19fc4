package render

import (
	"strings"
	"testing"
)

// The stylesheet holds the classes the renders write: highlighting in a
// light scheme and in a dark one, diffs, tool calls, the plan.
func TestCSS_HoldsTheClassesRendersWrite(t *testing.T) {
	css := string(CSS())
	dark := strings.LastIndex(css, "@media (prefers-color-scheme: dark) {\n  ")
	if dark < 0 {
		t.Fatal("no dark scheme for the highlighting")
	}
	for _, sel := range []string{".diff-add", ".diff-del", ".diff-hunk", ".tool-done", ".tool-failed", ".plan-completed", ".thoughts", ".md-raw", ".omitted"} {
		if !strings.Contains(css, sel+" ") && !strings.Contains(css, sel+",") {
			t.Errorf("no rule for %s", sel)
		}
	}
	if i := strings.Index(css, ".chroma .kd {"); i < 0 || i > dark || !strings.Contains(css[dark:], ".chroma .kd {") {
		t.Error("keywords are not highlighted in both schemes")
	}
	if strings.Contains(css, "url(") || strings.Contains(css, "@import") {
		t.Error("the stylesheet loads something")
	}
}
