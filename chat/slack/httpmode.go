package slack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"acpbroker/listener"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
)

// The paths the HTTP listener serves; each takes events, interactions
// and commands alike, so that any of them may be given as a Request URL.
const (
	PathEvents        = "/slack/events"
	PathInteractivity = "/slack/interactivity"
	PathCommands      = "/slack/commands"
)

// maxRequest bounds the body of a request Slack posts.
const maxRequest = 1 << 20

// replayWindow is how long a request's MAC is remembered: a timestamp
// more than five minutes off (either way) is refused, so a replay later
// than that is refused anyway.
const replayWindow = 2*maxSkew + time.Minute

// runHTTP serves the Events API and interactivity on Config.Listen until
// ctx ends.
func (c *Client) runHTTP(ctx context.Context) error {
	ln, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return fmt.Errorf("slack.listen: %w", err)
	}
	mux := http.NewServeMux()
	for _, p := range []string{PathEvents, PathInteractivity, PathCommands} {
		mux.HandleFunc(p, c.serveSlack)
	}
	// Slack posts a request at a time per event: a few hundred
	// connections are plenty, and no flood of them uses up descriptors.
	limited := listener.Limit(ln, 256)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, ConnState: limited.ConnState(nil), BaseContext: func(net.Listener) context.Context { return c.ctx }}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(limited) }()
	c.mu.Lock()
	c.addr = ln.Addr()
	c.mu.Unlock()
	c.setOnline(true)
	c.accept()
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	c.srv.Accept(false)
	c.setOnline(false)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	if ctx.Err() != nil {
		<-served
		return nil
	}
	return fmt.Errorf("slack: http listener: %w", err)
}

// serveSlack takes one request Slack posts, once its signature (with
// the signing secret, over its timestamp, at most five minutes old) is
// good and it is not a replay of one taken: an event (JSON), an
// interaction (a form with payload=) or a slash command (a form with
// command=). It answers 200 as soon as what came is queued, within
// Slack's 3 seconds. A request is remembered by what it signs (its MAC,
// however its hex is written), so a replay of one taken is refused
// however it is spelt; Slack's retry of one taken (X-Slack-Retry-Num)
// is answered 200 and dropped, since Slack counts any other answer as a
// failed delivery.
func (c *Client) serveSlack(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest+1))
	if err != nil || len(body) > maxRequest {
		http.Error(w, "request too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	at := time.Now()
	mac, err := c.verify(r.Header, body, at)
	if err != nil {
		c.count(&c.stats.RefusedRequests)
		c.refusals.Warn().Err(err).Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("request refused")
		http.Error(w, "refused", http.StatusUnauthorized)
		return
	}
	key := string(mac)
	c.mu.Lock()
	fresh := !c.replays.ContainsOrPut(key, struct{}{})
	if !fresh && r.Header.Get("X-Slack-Retry-Num") != "" {
		c.stats.Deduplicated++
	}
	c.mu.Unlock()
	if !fresh {
		if r.Header.Get("X-Slack-Retry-Num") != "" {
			w.WriteHeader(http.StatusOK)
			return
		}
		c.count(&c.stats.RefusedRequests)
		c.refusals.Warn().Err(errReplayed).Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("request refused")
		http.Error(w, "refused", http.StatusUnauthorized)
		return
	}
	if status := c.serveVerified(r.Context(), w, r.Header, body, at); status != http.StatusOK {
		// Not taken: Slack's retry of it, signed as it was, is no replay.
		c.mu.Lock()
		c.replays.Remove(key)
		c.mu.Unlock()
	}
}

// serveVerified takes a verified request and returns the status it
// answered. A modal's submission is answered once the Server has
// answered it (within Slack's 3 seconds): errors keep the modal open.
func (c *Client) serveVerified(ctx context.Context, w http.ResponseWriter, h http.Header, body []byte, at time.Time) int {
	ctype, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if ctype == "application/json" {
		return c.serveEvent(w, body, at)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return http.StatusBadRequest
	}
	in := inbound{at: at}
	switch {
	case form.Has("payload"):
		var cb slackapi.InteractionCallback
		if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return http.StatusBadRequest
		}
		in.interaction = &cb
		if cb.Type == slackapi.InteractionTypeViewSubmission {
			in.form = newFormAck()
		}
	case form.Has("command"):
		in.command = &slackapi.SlashCommand{
			TeamID: form.Get("team_id"), TeamDomain: form.Get("team_domain"), ChannelID: form.Get("channel_id"),
			ChannelName: form.Get("channel_name"), UserID: form.Get("user_id"), UserName: form.Get("user_name"),
			Command: form.Get("command"), Text: form.Get("text"), ResponseURL: form.Get("response_url"),
			TriggerID: form.Get("trigger_id"), APIAppID: form.Get("api_app_id"),
		}
	default:
		http.Error(w, "neither an interaction nor a command", http.StatusBadRequest)
		return http.StatusBadRequest
	}
	if !c.take(in, false, deliveryKeys(in, body)...) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	}
	if in.form != nil {
		if p := in.form.wait(ctx, at); p != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Write(p)
			return http.StatusOK
		}
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// Why a request is refused.
var (
	errReplayed     = errors.New("a replay of a request already taken")
	errUnsigned     = errors.New("no signature or no timestamp")
	errStale        = errors.New("the timestamp is more than five minutes off")
	errBadSignature = errors.New("the signature does not match")
)

// maxSkew is how far a request's timestamp may be from now, as Slack's
// own verifier allows.
const maxSkew = 5 * time.Minute

// verify checks a request's signature (v0=, the hex of the HMAC-SHA256
// of "v0:timestamp:body" with the signing secret), compared as bytes,
// and that its timestamp is at most five minutes off; it returns the
// MAC, which names what was signed.
func (c *Client) verify(h http.Header, body []byte, now time.Time) ([]byte, error) {
	ts := h.Get("X-Slack-Request-Timestamp")
	sig, ok := strings.CutPrefix(h.Get("X-Slack-Signature"), "v0=")
	if ts == "" || !ok {
		return nil, errUnsigned
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the timestamp %q is not a number", label(ts, 20))
	}
	if d := now.Sub(time.Unix(sec, 0)); d > maxSkew || d < -maxSkew {
		return nil, errStale
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return nil, errBadSignature
	}
	m := hmac.New(sha256.New, []byte(c.cfg.SigningSecret))
	fmt.Fprintf(m, "v0:%s:", ts)
	m.Write(body)
	want := m.Sum(nil)
	if !hmac.Equal(got, want) {
		return nil, errBadSignature
	}
	return want, nil
}

// serveEvent takes an Events API request: the URL's verification, or an
// event.
func (c *Client) serveEvent(w http.ResponseWriter, body []byte, at time.Time) int {
	var outer struct {
		Type      string `json:"type"`
		EventID   string `json:"event_id"`
		Challenge string `json:"challenge"`
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		http.Error(w, "bad event", http.StatusBadRequest)
		return http.StatusBadRequest
	}
	switch outer.Type {
	case slackevents.URLVerification:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"challenge": outer.Challenge})
		return http.StatusOK
	case slackevents.AppRateLimited:
		c.log.Warn().Msg("Slack is holding back this app's events: it sent more than its limit")
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
	ev, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken())
	var keys []string
	if outer.EventID != "" {
		keys = append(keys, "ev:"+outer.EventID)
	}
	if err == nil && ev.InnerEvent.Data != nil && !c.take(inbound{event: &ev, at: at}, false, keys...) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	}
	w.WriteHeader(http.StatusOK) // taken, or an event the app does not take
	return http.StatusOK
}
