package discord

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"
)

// fuzzClient is a Client that reaches no Discord: its REST calls fail at
// once (nothing listens on port 1).
func fuzzClient(t *testing.T, eng *countingEngine) *Client {
	c, err := New(Config{Token: "t", APIURL: "http://127.0.0.1:1/api/v9/", MaxTextBytes: 4096, MaxImageBytes: 4096,
		Access: Access{AllowedChannels: []string{"chan"}, Approvers: []string{"301"}}}, eng)
	if err != nil {
		t.Fatal(err)
	}
	me := "999"
	c.botID.Store(&me)
	c.accepting = true
	c.convs["thread-1"] = &conversation{thread: "thread-1", parent: "chan", starter: "201"}
	return c
}

func closeFuzzClient(c *Client) {
	c.cancel()
	c.wg.Wait()
}

// FuzzMessage_BecomesAPrompt turns an arbitrary message with one
// attachment (any name, type, declared size and body) into a prompt: the
// result is either prompt content within the limits or a refusal in
// words, never both, never a panic.
func FuzzMessage_BecomesAPrompt(f *testing.F) {
	var body atomic.Pointer[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(*body.Load())
	}))
	f.Cleanup(srv.Close)
	f.Add("<@999> hello", "notes.md", "text/markdown", 5, []byte("hello"))
	f.Add("look", "cat.png", "image/png", 8, []byte("\x89PNG\r\n\x1a\n"))
	f.Add("", "a.bin", "application/octet-stream", 3, []byte{0, 1, 2})
	f.Add("<@!999>", "big.txt", "text/plain", 1<<30, []byte("x"))
	f.Add("x", "lies.txt", "text/plain; charset=utf-8", 1, []byte("more than one byte"))
	f.Add("x", "bad.txt", "text/plain", 3, []byte("\xff\xfe\xfd"))
	f.Fuzz(func(t *testing.T, content, filename, ctype string, declared int, data []byte) {
		body.Store(&data)
		c := fuzzClient(t, &countingEngine{submits: map[string]int{}})
		defer closeFuzzClient(c)
		m := &discordgo.Message{ID: "m1", ChannelID: "thread-1", Content: content, Author: &discordgo.User{ID: "201"},
			Attachments: []*discordgo.MessageAttachment{{ID: "a1", Filename: filename, ContentType: ctype, Size: declared, URL: srv.URL + "/a"}}}
		text, images, refusal := c.attachments(context.Background(), m)
		if refusal != "" && (len(text) > 0 || len(images) > 0) {
			t.Fatalf("refused (%q) and gave content too", refusal)
		}
		for _, b := range text {
			if int64(len(b.Text)) > c.cfg.MaxTextBytes+int64(len(filename))+256 {
				t.Fatalf("a text block of %d bytes passed a %d-byte limit", len(b.Text), c.cfg.MaxTextBytes)
			}
			if !utf8.ValidString(b.Text) {
				t.Fatalf("a text block is not UTF-8: %q", b.Text)
			}
		}
		for _, b := range images {
			raw, err := base64.StdEncoding.DecodeString(b.Data)
			if err != nil || int64(len(raw)) > c.cfg.MaxImageBytes {
				t.Fatalf("an image block of %d bytes (%v) passed a %d-byte limit", len(raw), err, c.cfg.MaxImageBytes)
			}
		}
		_ = stripMention(content, c.me())
		_ = threadName(content, m.Author)
	})
}

// FuzzInteraction_IsAnsweredOrRefused dispatches an arbitrary interaction
// payload as the gateway would deliver it: clicks and commands, well
// formed or not, are handled or refused without a panic.
func FuzzInteraction_IsAnsweredOrRefused(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"},"roles":[]},"data":{"id":"c","name":"cancel","type":1}}`,
		`{"id":"2","type":2,"channel_id":"thread-1","token":"tok","user":{"id":"202"},"data":{"name":"reset"}}`,
		`{"id":"3","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"301"}},"data":{"name":"status"}}`,
		`{"id":"4","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"perm:abcd:1:0","component_type":2}}`,
		`{"id":"5","type":3,"channel_id":"thread-1","token":"tok","data":{"custom_id":"perm::","component_type":2}}`,
		`{"id":"6","type":3,"channel_id":"elsewhere","token":"tok","data":{"custom_id":"perm:x:y:-1"}}`,
		`{"id":"7","type":5,"channel_id":"thread-1","token":"tok","data":{"custom_id":"modal","components":[]}}`,
		`{"id":"8","type":2}`,
		`{"type":99}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var ic discordgo.InteractionCreate
		if json.Unmarshal(payload, &ic) != nil || ic.Interaction == nil {
			return // the gateway would not deliver it
		}
		eng := &countingEngine{submits: map[string]int{}}
		c := fuzzClient(t, eng)
		c.onInteraction(nil, &ic)
		closeFuzzClient(c)
	})
}
