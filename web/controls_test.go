package web

import (
	"testing"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// What the chat says of a command given on a page reads there as plain
// words: people by their names as the chat shows them (by their ids
// when the page knows no name), threads by their ids, no Markdown marks.
func TestPlain_AChatMessageReadsAsWords(t *testing.T) {
	names := map[string]string{"201": "Alice", "202": ""}
	for in, want := range map[string]string{
		"⚙️ <@201> set **Model** to **Fake Large**.":                      "⚙️ @Alice set Model to Fake Large.",
		"🍴 <@201> forked this conversation into <#77>: it goes on there.": "🍴 @Alice forked this conversation into #77: it goes on there.",
		"🔁 resumed session `sess-1`\n-# on the web":                       "🔁 resumed session sess-1\non the web",
		"<@202> and <@203> wait; <#201> is a thread":                      "@202 and @203 wait; #201 is a thread",
	} {
		if got := plain(in, names); got != want {
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
