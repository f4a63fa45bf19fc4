package console

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/acp"
)

// chunk is an answer's chunk of text, as the agent streams it.
func chunk(text string) acp.Update {
	b := acp.TextBlock(text)
	return acp.Update{Kind: acp.UpdateMessageChunk, Content: &b}
}

// The console writes whole lines: an answer's unfinished line waits for
// its end, or a pause, and the console's own lines never land inside it.
func TestConsole_OutputIsWrittenWholeLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		c := &Console{Out: &out}
		s := &sink{c: c}
		s.Update(chunk("hel"))
		if got := out.String(); got != "" {
			t.Fatalf("an unfinished line was written at once: %q", got)
		}
		s.Update(chunk("lo\nwor"))
		if got, want := out.String(), "agent> hello\n"; got != want {
			t.Fatalf("after a line's end, the console shows %q, want %q", got, want)
		}
		c.printf("[status]\n")
		s.Update(chunk("ld\n"))
		if got, want := out.String(), "agent> hello\nwor\n[status]\nagent> ld\n"; got != want {
			t.Fatalf("a line of the console's own in an answer's: %q, want %q", got, want)
		}
		// An agent that pauses mid-line is shown as far as it got.
		s.Update(chunk("working…"))
		time.Sleep(partialWait)
		synctest.Wait()
		if got := out.String(); !strings.HasSuffix(got, "agent> ld\nworking…") {
			t.Fatalf("after a pause, the unfinished line is not shown: %q", got)
		}
		s.breakLine()
		if got := out.String(); !strings.HasSuffix(got, "ld\nworking…\n") {
			t.Fatalf("the answer's line was not ended: %q", got)
		}
	})
}
