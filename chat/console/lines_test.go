package console

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"acpbroker/chat/thread"
)

// quiet is a console of no engine that writes to out, as its Server
// drives it.
func quiet(t *testing.T) (*Console, *platform, *strings.Builder) {
	out := &strings.Builder{}
	c := New(Config{Out: out, User: "tester"})
	t.Cleanup(func() { c.srv.Close(time.Second) })
	return c, (*platform)(c), out
}

// The console writes whole lines: a message's unfinished line waits for
// its end, or a pause, and the console's own lines never land inside
// it; an edit prints what is new, never what is printed already.
func TestConsole_OutputIsWrittenWholeLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, p, out := quiet(t)
		ctx := context.Background()
		id, _ := p.Post(ctx, Thread, thread.View{Text: "hel"})
		if got := out.String(); got != "" {
			t.Fatalf("an unfinished line was written at once: %q", got)
		}
		p.Edit(ctx, Thread, id, thread.View{Text: "hello\nwor"})
		if got, want := out.String(), "hello\n"; got != want {
			t.Fatalf("after a line's end, the console shows %q, want %q", got, want)
		}
		c.printf("[status]\n")
		p.Edit(ctx, Thread, id, thread.View{Text: "hello\nworld\n"})
		if got, want := out.String(), "hello\nwor\n[status]\nworld\n"; got != want {
			t.Fatalf("a line of the console's own in a message's: %q, want %q", got, want)
		}
		// A message that pauses mid-line is shown as far as it got, and
		// goes on on the same line.
		p.Edit(ctx, Thread, id, thread.View{Text: "hello\nworld\nworking"})
		time.Sleep(partialWait)
		synctest.Wait()
		if got := out.String(); !strings.HasSuffix(got, "world\nworking") {
			t.Fatalf("after a pause, the unfinished line is not shown: %q", got)
		}
		p.Edit(ctx, Thread, id, thread.View{Text: "hello\nworld\nworking…\n"})
		if got := out.String(); !strings.HasSuffix(got, "world\nworking…\n") {
			t.Fatalf("the line was not continued: %q", got)
		}
		// A line above that changed is printed again, alone; the lines
		// printed already are not.
		out.Reset()
		p.Edit(ctx, Thread, id, thread.View{Text: "⏳ `ls` running\nhello\nworld\nworking…\n"})
		p.Edit(ctx, Thread, id, thread.View{Text: "✅ `ls` done\nhello\nworld\nworking…\ndone.\n-# ✅ done in 1s", Outcome: true})
		if got, want := out.String(), "⏳ `ls` running\n✅ `ls` done\ndone.\n✅ done in 1s\n"; got != want {
			t.Fatalf("the edits printed %q, want %q", got, want)
		}
	})
}

// A message's buttons are numbered; a number clicks the newest
// message's, and only while it shows them.
func TestConsole_ANumberClicksTheNewestMessagesButton(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, p, out := quiet(t)
		ctx := context.Background()
		p.Post(ctx, Thread, thread.View{Text: "first?", Actions: []thread.Action{{ID: "a", Label: "A"}}})
		id, _ := p.Post(ctx, Thread, thread.View{Text: "second?", Actions: []thread.Action{
			{Label: "Docs", URL: "https://example.com"}, {ID: "b", Label: "Yes"}, {ID: "c", Label: "No"}}})
		if !strings.Contains(out.String(), "second?\n  link: https://example.com\n  1) Yes\n  2) No\nType a number to choose.\n") {
			t.Fatalf("the buttons are not numbered: %q", out.String())
		}
		c.mu.Lock()
		b, ok := button(c.msgs[c.choices].actions, 2)
		c.mu.Unlock()
		if !ok || b.ID != "c" {
			t.Fatalf("2 clicks %+v, %v; want the newest message's No", b, ok)
		}
		if _, ok := button(c.msgs[c.choices].actions, 3); ok {
			t.Fatal("3 clicks a button the message does not have")
		}
		p.Edit(ctx, Thread, id, thread.View{Text: "second?\nanswered"})
		if c.click(1) {
			t.Fatal("a number clicked a message that shows no buttons any more")
		}
	})
}
