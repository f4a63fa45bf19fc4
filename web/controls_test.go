package web

import (
	"testing"

	"acpbroker/acp"
	"acpbroker/adapter"
)

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

// A select the agent offers with no values gets no select on the page;
// a boolean is on and off.
func TestChoices_AnOptionWithNoValuesHasNoSelect(t *testing.T) {
	o := adapter.ThreadOptions{SessionState: acp.SessionState{Options: []acp.ConfigOption{
		{ID: "empty", Name: "Empty", Type: acp.ConfigSelect},
		{ID: "fast", Name: "Fast", Type: acp.ConfigBoolean, On: true},
	}}}
	got := choices(o)
	if len(got) != 1 || got[0].Option != "fast" || got[0].Current != "true" || len(got[0].Choices) != 2 {
		t.Fatalf("choices: %+v", got)
	}
	if offered(o, "config", "empty", "") || !offered(o, "config", "fast", "false") {
		t.Errorf("offered does not follow the selects")
	}
}
