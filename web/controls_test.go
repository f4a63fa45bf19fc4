package web

import "testing"

// What the chat says of a command given on a page reads there as plain
// words: people and threads by their ids, no Markdown marks.
func TestPlain_AChatMessageReadsAsWords(t *testing.T) {
	for in, want := range map[string]string{
		"⚙️ <@201> set **Model** to **Fake Large**.":                      "⚙️ @201 set Model to Fake Large.",
		"🍴 <@201> forked this conversation into <#77>: it goes on there.": "🍴 @201 forked this conversation into #77: it goes on there.",
		"🔁 resumed session `sess-1`\n-# on the web":                       "🔁 resumed session sess-1\non the web",
	} {
		if got := plain(in); got != want {
			t.Errorf("plain(%q) = %q, want %q", in, got, want)
		}
	}
}
