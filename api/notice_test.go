package api

import (
	"bufio"
	"context"
	"encoding/json"
	"testing"

	"acpbroker/adapter"
)

// A notice event says the engine's notice in the chat's words and names
// its kind, for a client that acts on what happened rather than on the
// words.
func TestEvents_ANoticeHasItsKindAndText(t *testing.T) {
	a := listen(t, nil)
	id, p := a.start()
	p.Sink.Notice(adapter.ImagesLeftOut{Count: 2})
	done(p, "ok")
	resp, err := a.stream(context.Background(), id) // the events kept are replayed
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var notices []map[string]string
	for {
		typ, data, err := nextEvent(r)
		if err != nil {
			t.Fatalf("the stream broke: %v", err)
		}
		if typ == "notice" {
			var n map[string]string
			if err := json.Unmarshal([]byte(data), &n); err != nil {
				t.Fatalf("notice %s: %v", data, err)
			}
			notices = append(notices, n)
		}
		if typ == "end" {
			break
		}
	}
	want := map[string]string{"kind": "images_left_out", "text": "This agent does not accept images; 2 image(s) were left out."}
	if len(notices) != 1 || len(notices[0]) != len(want) || notices[0]["kind"] != want["kind"] || notices[0]["text"] != want["text"] {
		t.Fatalf("notices %v, want [%v]", notices, want)
	}
}
