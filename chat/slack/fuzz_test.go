package slack

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/internal/fakeslack"

	"github.com/rs/zerolog"
)

// Whatever Markdown a view holds, its blocks are within Slack's limits.
func FuzzBlocks_WithinSlacksLimits(f *testing.F) {
	for _, s := range []string{"", "**a**", "-# x", "```go\n-# not small\n", "<@U1> & <x|y>", "[a](https://b)", "> q\n# h\n- i",
		"a\n-# b\na\n-# b\na\n-# b", "`` ` ``", "\\*", "***", "~~~~", "[x](https://y) ](z)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		set, fallback := blocks(text, []thread.Action{{ID: "a", Label: text}}, "slack:C1/1.2")
		raw, err := json.Marshal(set)
		if err != nil {
			t.Fatal(err)
		}
		var list []json.RawMessage
		json.Unmarshal(raw, &list)
		blockLimits(t, list)
		if fallback == "" {
			t.Fatal("no text for notifications")
		}
	})
}

// fuzzClient is a Client of a Slack whose every Web API call answers
// ok, not connected: what Slack posts is handed to it directly.
func fuzzClient(t testing.TB) *Client {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(api.Close)
	c, err := New(Config{BotToken: "xoxb", Mode: ModeHTTP, SigningSecret: "secret", Listen: "127.0.0.1:0",
		APIURL: api.URL + "/api/", Access: Access{Access: thread.Access{AllowAllChannels: true}},
		Logger: zerolog.New(io.Discard)}, &adapter.Engine{})
	if err != nil {
		t.Fatal(err)
	}
	c.me.Store(&identity{userID: "UBOT", botID: "BBOT"})
	t.Cleanup(func() { c.Close(time.Second) })
	return c
}

// Anything posted to the listener with a good signature is answered
// (200, or 400 when it is no request Slack sends) and, taken, is
// dispatched without a panic, whatever its shape: events of any type
// and fields, interactions, commands.
func FuzzServeSlack_TakesOrRefusesAnything(f *testing.F) {
	for _, s := range []string{
		`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","channel":"C1","user":"U1","text":"<@UBOT> hi","ts":"1.1"}}`,
		`{"type":"event_callback","event_id":"Ev2","event":{"type":"message","subtype":"message_changed","channel":"C1"}}`,
		`{"type":"event_callback","event_id":"Ev3","event":{"type":"reaction_added","user":"U1","reaction":"octagonal_sign","item":{"type":"message","channel":"C1","ts":"1.1"}}}`,
		`{"type":"event_callback","event_id":"Ev4","event":{"type":"app_mention","channel":"C1","text":"<@UBOT","ts":"x"}}`,
		`{"type":"url_verification","challenge":"c"}`,
		`payload={"type":"block_actions","user":{"id":"U1"},"actions":[null,{"action_id":"stop:x"}],"container":{"type":"message"}}`,
		`payload={"type":"view_submission","user":{"id":"U1"},"view":{"callback_id":"elic:1:modal","private_metadata":"{","state":{"values":{"f|0":{"0":{"value":"v"}}}}}}`,
		`command=/acp&text=new+fix&channel_id=C1&user_id=U1`,
		`command=/acp&text=&channel_id=&user_id=`,
		`{}`, `[]`, `x`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		c := fuzzClient(t)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req := httptest.NewRequest(http.MethodPost, PathEvents, bytes.NewReader([]byte(body)))
		ctype := "application/json"
		if _, err := url.ParseQuery(body); err == nil && !json.Valid([]byte(body)) {
			ctype = "application/x-www-form-urlencoded"
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", fakeslack.Sign("secret", ts, []byte(body)))
		rec := httptest.NewRecorder()
		c.serveSlack(rec, req)
		if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
			t.Fatalf("answered %d", rec.Code)
		}
		for {
			select {
			case in := <-c.queue:
				switch {
				case in.event != nil:
					c.onEvent(in.event)
				case in.interaction != nil:
					c.onInteraction(in.interaction, in.at, in.form)
				case in.command != nil:
					c.onCommand(in.command, in.at)
				}
				continue
			default:
			}
			break
		}
	})
}
