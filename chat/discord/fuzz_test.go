package discord

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// fuzzDiscord is a Discord that answers every REST call with one
// message, at once: what the Client sends is not the fuzzed part, and a
// Discord that failed would make it wait between tries.
func fuzzDiscord(f *testing.F) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"77","channel_id":"thread-1","content":""}`)
	}))
	f.Cleanup(srv.Close)
	return srv.URL + "/api/v9/"
}

// fuzzClient is a Client of the Discord at api (fuzzDiscord).
func fuzzClient(t *testing.T, eng *countingEngine, api string) *Client {
	c, err := New(Config{Token: "t", APIURL: api, MaxTextBytes: 4096, MaxImageBytes: 4096,
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
	c.cfg.HTTPClient.CloseIdleConnections()
}

// FuzzMessage_BecomesAPrompt turns an arbitrary message with one
// attachment (any name, type, declared size and body) into a prompt: the
// result is either prompt content within the limits or a refusal in
// words, never both, never a panic; handled as the thread's next message
// it reaches the agent at most once, and never when refused.
func FuzzMessage_BecomesAPrompt(f *testing.F) {
	var body atomic.Pointer[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(*body.Load())
	}))
	f.Cleanup(srv.Close)
	api := fuzzDiscord(f)
	f.Add("<@999> hello", "notes.md", "text/markdown", 5, []byte("hello"))
	f.Add("look", "cat.png", "image/png", 8, []byte("\x89PNG\r\n\x1a\n"))
	f.Add("", "a.bin", "application/octet-stream", 3, []byte{0, 1, 2})
	f.Add("<@!999>", "big.txt", "text/plain", 1<<30, []byte("x"))
	f.Add("x", "lies.txt", "text/plain; charset=utf-8", 1, []byte("more than one byte"))
	f.Add("x", "bad.txt", "text/plain", 3, []byte("\xff\xfe\xfd"))
	f.Fuzz(func(t *testing.T, content, filename, ctype string, declared int, data []byte) {
		body.Store(&data)
		eng := &countingEngine{submits: map[string]int{}}
		c := fuzzClient(t, eng, api)
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

		// The whole way, as a message in the thread: a refused message
		// reaches the agent never, any other at most once.
		c.mu.Lock()
		conv := c.convs["thread-1"]
		c.mu.Unlock()
		c.handleMessage(m, conv, false, nil)
		c.wg.Wait()
		switch n := eng.count("thread-1"); {
		case refusal != "" && n != 0:
			t.Fatalf("a message refused (%q) reached the agent", refusal)
		case n > 1:
			t.Fatalf("one message reached the agent %d times", n)
		}
	})
}

// The fuzzed interactions find, open in the thread, a permission request
// and a form question, so that clicks, menu choices and modal answers
// reach them. {P} and {Q} in a payload stand for their custom ids.
const (
	fuzzPermKey     = "fz"
	fuzzQuestionKey = "fq"
	fuzzForm        = `{"sessionId":"s","mode":"form","message":"Details?","requestedSchema":{"type":"object",
"properties":{"name":{"type":"string","title":"Name","maxLength":20},"count":{"type":"integer","minimum":1,"maximum":10},
"colour":{"type":"string","enum":["red","green","blue"]},"ship":{"type":"boolean"},
"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},"required":["name","count"]}}`
)

// openFuzzRequests puts the permission request and the question in c's
// tables, as the thread's turn would.
func openFuzzRequests(t *testing.T, c *Client) (*openPermission, *openQuestion) {
	var req acp.ElicitationRequest
	if err := json.Unmarshal([]byte(fuzzForm), &req); err != nil {
		t.Fatal(err)
	}
	texts, _, unfit := questionLayout(&req)
	if unfit != nil {
		t.Fatal(unfit)
	}
	op := &openPermission{thread: "thread-1", parent: "chan", starter: "201", title: "Run make", ctx: context.Background(),
		answer: make(chan choice, 1), options: []acp.PermissionOption{{OptionID: "yes", Name: "Allow", Kind: "allow_once"}, {OptionID: "no", Name: "Reject", Kind: "reject_once"}}}
	oq := &openQuestion{thread: "thread-1", parent: "chan", starter: "201", req: &req, ctx: context.Background(),
		answer: make(chan adapter.ElicitAnswer, 1), values: defaults(&req), texts: texts}
	c.mu.Lock()
	c.perms[permPrefix+fuzzPermKey] = op
	c.questions[questionPrefix+fuzzQuestionKey] = oq
	c.mu.Unlock()
	return op, oq
}

// FuzzInteraction_IsAnsweredOrRefused dispatches arbitrary interaction
// payloads (one a line, in order) as the gateway would deliver them:
// commands, autocompletion, clicks, menu choices and modals, well formed
// or not, are handled or refused without a panic. Whatever it is, an open permission request is
// answered only by the thread's starter or an approver, with one of its
// own options, and an open question only by them, with an answer its
// form allows.
func FuzzInteraction_IsAnsweredOrRefused(f *testing.F) {
	api := fuzzDiscord(f)
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
		// The open permission request: the starter, a stranger, an approver.
		`{"id":"9","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{P}:0","component_type":2}}`,
		`{"id":"10","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"202"}},"data":{"custom_id":"{P}:1","component_type":2}}`,
		`{"id":"11","type":3,"channel_id":"thread-1","token":"tok","user":{"id":"301"},"data":{"custom_id":"{P}:7","component_type":2}}`,
		// The open question: menus, the modal, Submit, Decline.
		`{"id":"12","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:f:2","component_type":3,"values":["1"]}}`,
		`{"id":"13","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:f:4","component_type":3,"values":["a","b","c"]}}`,
		`{"id":"14","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:open","component_type":2}}`,
		`{"id":"15","type":5,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:modal","components":[{"type":1,"components":[{"type":4,"custom_id":"0","value":"Ada"}]},{"type":1,"components":[{"type":4,"custom_id":"1","value":"7"}]}]}}`,
		`{"id":"16","type":5,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:modal","components":[{"type":1,"components":[{"type":4,"custom_id":"1","value":"eleven"}]}]}}`,
		`{"id":"17","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:submit","component_type":2}}`,
		`{"id":"18","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"202"}},"data":{"custom_id":"{Q}:decline","component_type":2}}`,
		`{"id":"19","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"301"}},"data":{"custom_id":"{Q}:done","component_type":2}}`,
		`{"id":"30","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:decline","component_type":2}}`,
		// A whole answer: the modal, a menu, then Submit.
		`{"id":"31","type":5,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:modal","components":[{"type":1,"components":[{"type":4,"custom_id":"0","value":"Ada"}]},{"type":1,"components":[{"type":4,"custom_id":"1","value":"7"}]}]}}` + "\n" +
			`{"id":"32","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:f:2","component_type":3,"values":["2"]}}` + "\n" +
			`{"id":"34","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"custom_id":"{Q}:f:4","component_type":3,"values":["0","1"]}}` + "\n" +
			`{"id":"33","type":3,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"301"}},"data":{"custom_id":"{Q}:submit","component_type":2}}`,
		// Commands with options, and their autocompletion.
		`{"id":"20","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"model","options":[{"name":"value","type":3,"value":"fast"}]}}`,
		`{"id":"21","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"config","options":[{"name":"option","type":3,"value":"effort"},{"name":"value","type":3,"value":"high"}]}}`,
		`{"id":"22","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"202"}},"data":{"name":"mode","options":[{"name":"value","type":3,"value":"plan"}]}}`,
		`{"id":"23","type":2,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"agent","options":[{"name":"name","type":3,"value":"review"},{"name":"input","type":3,"value":"HEAD~1"}]}}`,
		`{"id":"24","type":2,"channel_id":"chan","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"new","options":[{"name":"agent","type":3,"value":"codex"},{"name":"prompt","type":3,"value":"hi"}]}}`,
		`{"id":"25","type":2,"channel_id":"chan","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"agents"}}`,
		`{"id":"26","type":4,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"model","options":[{"name":"value","type":3,"value":"fa","focused":true}]}}`,
		`{"id":"27","type":4,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"config","options":[{"name":"option","type":3,"value":"","focused":true}]}}`,
		`{"id":"28","type":4,"channel_id":"thread-1","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"agent","options":[{"name":"name","type":3,"value":"re","focused":true}]}}`,
		`{"id":"29","type":4,"channel_id":"chan","token":"tok","member":{"user":{"id":"201"}},"data":{"name":"new","options":[{"name":"agent","type":3,"value":"","focused":true}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		payload = bytes.ReplaceAll(payload, []byte("{P}"), []byte(permPrefix+fuzzPermKey))
		payload = bytes.ReplaceAll(payload, []byte("{Q}"), []byte(questionPrefix+fuzzQuestionKey))
		eng := &countingEngine{submits: map[string]int{}}
		c := fuzzClient(t, eng, api)
		op, oq := openFuzzRequests(t, c)
		for line := range bytes.Lines(payload) {
			var ic discordgo.InteractionCreate
			if json.Unmarshal(line, &ic) != nil || ic.Interaction == nil {
				continue // the gateway would not deliver it
			}
			c.onInteraction(nil, &ic)
			c.wg.Wait() // each is handled before the next arrives
		}
		closeFuzzClient(c)
		mayAct := func(by string) bool { return by == "201" || by == "301" }
		select {
		case ch := <-op.answer:
			if !mayAct(ch.by) {
				t.Fatalf("the permission request was answered by %q", ch.by)
			}
			if !slices.ContainsFunc(op.options, func(o acp.PermissionOption) bool { return o.OptionID == ch.optionID }) {
				t.Fatalf("the permission request was answered %q, not one of its options", ch.optionID)
			}
		default:
		}
		select {
		case a := <-oq.answer:
			if !mayAct(a.By) {
				t.Fatalf("the question was answered by %q", a.By)
			}
			if a.Result.Action == acp.ActionAccept {
				if err := oq.req.Check(a.Result.Content); err != nil {
					t.Fatalf("the question was answered %v, which its form does not allow: %v", a.Result.Content, err)
				}
			}
		default:
		}
	})
}
