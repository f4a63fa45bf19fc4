package discord

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// fuzzDiscord is a Discord that answers every REST call with one
// message, at once, and keeps the bodies of what the bot posted: what
// the Client sends is not the fuzzed part, and a Discord that failed
// would make it wait between tries.
type fuzzDiscord struct {
	api string
	mu  sync.Mutex
	// posts are the bodies of the messages posted (multipart ones as
	// they are).
	posts []string
}

func newFuzzDiscord(f *testing.F) *fuzzDiscord {
	d := &fuzzDiscord{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages") {
			body, _ := io.ReadAll(r.Body)
			d.mu.Lock()
			d.posts = append(d.posts, string(body))
			d.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"77","channel_id":"thread-1","content":""}`)
	}))
	f.Cleanup(srv.Close)
	d.api = srv.URL + "/api/v9/"
	return d
}

// posted are the bodies posted since mark (a count of posts).
func (d *fuzzDiscord) posted(mark int) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.posts[min(mark, len(d.posts)):]...)
}

func (d *fuzzDiscord) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.posts)
}

// fuzzClient is a Client of the Discord at api (fuzzDiscord), taking
// events, which knows thread-1, started by 201 in chan; 301 approves.
func fuzzClient(t *testing.T, eng *countingEngine, api string) *Client {
	c, err := New(Config{Token: "t", APIURL: api, MaxTextBytes: 4096, MaxImageBytes: 4096,
		Access: Access{AllowedChannels: []string{"chan"}, Approvers: []string{"301"}},
		Memory: memoryOf("thread-1", "chan", "201")}, eng)
	if err != nil {
		t.Fatal(err)
	}
	me := "999"
	c.botID.Store(&me)
	c.srv.Accept(true)
	return c
}

// closeFuzzClient waits for what the Client was handed to be done.
func closeFuzzClient(c *Client) {
	c.Close(10 * time.Second)
	c.cfg.HTTPClient.CloseIdleConnections()
}

// FuzzMessage_BecomesAPrompt turns an arbitrary message with one
// attachment (any name, type, declared size and body) into a prompt: it
// reaches the agent at most once, as content within the limits, or is
// refused in words and never reaches it, never both, never a panic.
func FuzzMessage_BecomesAPrompt(f *testing.F) {
	var body held[[]byte]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body.load())
	}))
	f.Cleanup(srv.Close)
	d := newFuzzDiscord(f)
	f.Add("<@999> hello", "notes.md", "text/markdown", 5, []byte("hello"))
	f.Add("look", "cat.png", "image/png", 8, []byte("\x89PNG\r\n\x1a\n"))
	f.Add("", "a.bin", "application/octet-stream", 3, []byte{0, 1, 2})
	f.Add("<@!999>", "big.txt", "text/plain", 1<<30, []byte("x"))
	f.Add("x", "lies.txt", "text/plain; charset=utf-8", 1, []byte("more than one byte"))
	f.Add("x", "bad.txt", "text/plain", 3, []byte("\xff\xfe\xfd"))
	f.Fuzz(func(t *testing.T, content, filename, ctype string, declared int, data []byte) {
		body.store(data)
		eng := &countingEngine{submits: map[string]int{}}
		c := fuzzClient(t, eng, d.api)
		mark := d.count()
		m := &discordgo.Message{ID: "m1", ChannelID: "thread-1", GuildID: "g", Content: content, Author: &discordgo.User{ID: "201"},
			Attachments: []*discordgo.MessageAttachment{{ID: "a1", Filename: filename, ContentType: ctype, Size: declared, URL: srv.URL + "/a"}}}
		c.onMessage(nil, &discordgo.MessageCreate{Message: m})
		closeFuzzClient(c)
		refused := false
		for _, p := range d.posted(mark) {
			if strings.Contains(p, "message_reference") && (strings.Contains(p, "Nothing was sent") || strings.Contains(p, "Mention me with")) {
				refused = true
			}
		}
		prompts := eng.submitted()
		switch {
		case refused && len(prompts) > 0:
			t.Fatalf("a message was refused and reached the agent too")
		case len(prompts) > 1:
			t.Fatalf("one message reached the agent %d times", len(prompts))
		case len(prompts) == 0:
			return
		}
		for _, b := range prompts[0].Blocks {
			if !strings.HasPrefix(b.Text, "Attached file ") {
				continue // the message's own text
			}
			if len(b.Text) > 4096+len(filename)+256 {
				t.Fatalf("a text block of %d bytes passed a 4096-byte limit", len(b.Text))
			}
			if !utf8.ValidString(b.Text) {
				t.Fatalf("a text block is not UTF-8: %q", b.Text)
			}
		}
		for _, b := range prompts[0].Images {
			raw, err := base64.StdEncoding.DecodeString(b.Data)
			if err != nil || len(raw) > 4096 {
				t.Fatalf("an image block of %d bytes (%v) passed a 4096-byte limit", len(raw), err)
			}
		}
	})
}

// held is a value the fuzz's file server serves.
type held[T any] struct {
	mu sync.Mutex
	v  T
}

func (h *held[T]) store(v T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.v = v
}

func (h *held[T]) load() T {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.v
}

// The fuzzed interactions find, open in the thread, a permission request
// and a form question, so that clicks, menu choices and modal answers
// reach them. {P} and {Q} in a payload stand for their custom ids'
// keys.
const fuzzForm = `{"sessionId":"s","mode":"form","message":"Details?","requestedSchema":{"type":"object",
"properties":{"name":{"type":"string","title":"Name","maxLength":20},"count":{"type":"integer","minimum":1,"maximum":10},
"colour":{"type":"string","enum":["red","green","blue"]},"ship":{"type":"boolean"},
"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},"required":["name","count"]}}`

// fuzzOptions are the permission request's.
var fuzzOptions = []acp.PermissionOption{{OptionID: "yes", Name: "Allow", Kind: "allow_once"}, {OptionID: "no", Name: "Reject", Kind: "reject_once"}}

// openRequests has the thread's turn ask the permission request and the
// question, and waits for both to be posted; it returns their keys and
// where their answers (or "cancelled", once ask ends) come.
func openRequests(t *testing.T, c *Client, eng *countingEngine, d *fuzzDiscord, ask context.Context) (perm, question string, perms chan adapter.Answer, questions chan adapter.ElicitAnswer) {
	var req acp.ElicitationRequest
	if err := json.Unmarshal([]byte(fuzzForm), &req); err != nil {
		t.Fatal(err)
	}
	perms, questions = make(chan adapter.Answer, 1), make(chan adapter.ElicitAnswer, 1)
	var once sync.Once // the first turn asks; those commands run do not
	eng.asked = func(sink adapter.Sink) {
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			perms <- sink.Ask(ask, &acp.PermissionRequest{ToolCall: acp.PermissionToolCall{Title: "Run make"}, Options: fuzzOptions})
		})
		wg.Go(func() { questions <- sink.(adapter.Elicitor).Elicit(ask, &req) })
		wg.Wait()
	}
	mark := d.count()
	c.onMessage(nil, &discordgo.MessageCreate{Message: &discordgo.Message{ID: "m0", ChannelID: "thread-1", GuildID: "g",
		Content: "ask", Author: &discordgo.User{ID: "201"}}})
	permID := regexp.MustCompile(`"custom_id":"(perm:[0-9a-f]+:[0-9a-z]+):0"`)
	questionID := regexp.MustCompile(`"custom_id":"(elic:[0-9a-f]+:[0-9a-z]+):submit"`)
	for deadline := time.Now().Add(10 * time.Second); perm == "" || question == ""; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the permission request and the question were not posted within 10s")
		}
		for _, p := range d.posted(mark) {
			if m := permID.FindStringSubmatch(p); m != nil {
				perm = m[1]
			}
			if m := questionID.FindStringSubmatch(p); m != nil {
				question = m[1]
			}
		}
	}
	return perm, question, perms, questions
}

// answered is a Reply that says when it is first used.
type answered struct {
	thread.Reply
	once sync.Once
	done chan struct{}
}

func (a *answered) signal() { a.once.Do(func() { close(a.done) }) }
func (a *answered) Private(ctx context.Context, v thread.View) {
	a.Reply.Private(ctx, v)
	a.signal()
}
func (a *answered) Public(ctx context.Context, text string) {
	a.Reply.Public(ctx, text)
	a.signal()
}
func (a *answered) Update(ctx context.Context, v thread.View) {
	a.Reply.Update(ctx, v)
	a.signal()
}
func (a *answered) Ack(ctx context.Context) {
	a.Reply.Ack(ctx)
	a.signal()
}
func (a *answered) Defer(ctx context.Context) {
	a.Reply.Defer(ctx)
	a.signal()
}
func (a *answered) Form(ctx context.Context, f thread.Form) {
	a.Reply.Form(ctx, f)
	a.signal()
}

// FuzzInteraction_IsAnsweredOrRefused dispatches arbitrary interaction
// payloads (one a line, in order) as the gateway would deliver them:
// commands, autocompletion, clicks, menu choices and modals, well formed
// or not, are handled or refused without a panic. Whatever it is, an open permission request is
// answered only by the thread's starter or an approver, with one of its
// own options, and an open question only by them, with an answer its
// form allows.
func FuzzInteraction_IsAnsweredOrRefused(f *testing.F) {
	d := newFuzzDiscord(f)
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
		eng := &countingEngine{submits: map[string]int{}}
		c := fuzzClient(t, eng, d.api)
		ask, stop := context.WithCancel(context.Background())
		perm, question, perms, questions := openRequests(t, c, eng, d, ask)
		payload = bytes.ReplaceAll(payload, []byte("{P}"), []byte(perm))
		payload = bytes.ReplaceAll(payload, []byte("{Q}"), []byte(question))
		for line := range bytes.Lines(payload) {
			var ic discordgo.InteractionCreate
			if json.Unmarshal(line, &ic) != nil || ic.Interaction == nil {
				continue // the gateway would not deliver it
			}
			r := &answered{Reply: &reply{c: c, i: ic.Interaction}, done: make(chan struct{})}
			if !c.dispatch(ic.Interaction, r) {
				c.wg.Wait() // an autocompletion, answered by the Client
				continue
			}
			select { // each is handled before the next arrives
			case <-r.done:
			case <-time.After(200 * time.Millisecond): // one that is no one's is never answered
			}
		}
		stop()
		mayAct := func(by string) bool { return by == "201" || by == "301" }
		if ans := <-perms; ans.By != "" {
			if !mayAct(ans.By) {
				t.Fatalf("the permission request was answered by %q", ans.By)
			}
			if !slices.ContainsFunc(fuzzOptions, func(o acp.PermissionOption) bool { return o.OptionID == ans.Outcome.OptionID }) {
				t.Fatalf("the permission request was answered %q, not one of its options", ans.Outcome.OptionID)
			}
		}
		if a := <-questions; a.By != "" {
			if !mayAct(a.By) {
				t.Fatalf("the question was answered by %q", a.By)
			}
			if a.Result.Action == acp.ActionAccept {
				var req acp.ElicitationRequest
				json.Unmarshal([]byte(fuzzForm), &req)
				if err := req.Check(a.Result.Content); err != nil {
					t.Fatalf("the question was answered %v, which its form does not allow: %v", a.Result.Content, err)
				}
			}
		}
		closeFuzzClient(c)
	})
}
