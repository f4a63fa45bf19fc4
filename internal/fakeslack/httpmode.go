package fakeslack

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// Endpoints are the Request URLs of an app that takes its events over
// HTTP instead of Socket Mode. Interactivity and Commands default to
// Events.
type Endpoints struct {
	Events        string
	Interactivity string
	Commands      string
}

// UseHTTP sends envelopes as signed HTTP requests to ep from now on:
// events as JSON, interactions as a form with payload=, commands as a
// form. An answer other than 200 within Options.AckTimeout fails the
// attempt; failed events are retried with X-Slack-Retry-Num and
// X-Slack-Retry-Reason unless the answer carries X-Slack-No-Retry: 1.
func (s *Server) UseHTTP(ep Endpoints) {
	if ep.Interactivity == "" {
		ep.Interactivity = ep.Events
	}
	if ep.Commands == "" {
		ep.Commands = ep.Events
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = &ep
	s.wakeScheduler()
}

// UseSocketMode sends envelopes over Socket Mode (the default).
func (s *Server) UseSocketMode() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = nil
	s.wakeScheduler()
}

// Sign returns the X-Slack-Signature of body sent at timestamp (Unix
// seconds) with secret: v0= and the hex HMAC-SHA256 of "v0:ts:body".
func Sign(secret, timestamp string, body []byte) string {
	h := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(h, "v0:%s:", timestamp)
	h.Write(body)
	return "v0=" + hex.EncodeToString(h.Sum(nil))
}

// encodeLocked renders an envelope as the HTTP request body Slack posts.
func (s *Server) encodeLocked(e *envelope) (target, ctype string, body []byte) {
	switch e.Type {
	case Interactive:
		return s.endpoints.Interactivity, "application/x-www-form-urlencoded",
			[]byte(url.Values{"payload": {string(e.Payload)}}.Encode())
	case SlashCommands:
		var fields map[string]string
		json.Unmarshal(e.Payload, &fields)
		v := url.Values{}
		for k, x := range fields {
			v.Set(k, x)
		}
		return s.endpoints.Commands, "application/x-www-form-urlencoded", []byte(v.Encode())
	}
	return s.endpoints.Events, "application/json", e.Payload
}

func (s *Server) signedHeader(ctype string, body []byte, at time.Time, secret string) http.Header {
	ts := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set("Content-Type", ctype)
	h.Set("User-Agent", "Slackbot 1.0 (+https://api.slack.com/robots)")
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", Sign(secret, ts, body))
	return h
}

// postLocked makes one HTTP attempt at an envelope, in a goroutine of
// its own.
func (s *Server) postLocked(e *envelope, now time.Time) {
	target, ctype, body := s.encodeLocked(e)
	h := s.signedHeader(ctype, body, now, s.opts.SigningSecret)
	if e.retries > 0 {
		h.Set("X-Slack-Retry-Num", strconv.Itoa(e.retries))
		h.Set("X-Slack-Retry-Reason", e.reason)
	}
	e.state = envSent
	e.Attempts = append(e.Attempts, Attempt{At: now, Retry: e.retries, URL: target, Header: h.Clone(), Body: body})
	idx := len(e.Attempts) - 1
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		status, answer, reason, noRetry := s.send(target, h, body)
		s.mu.Lock()
		defer s.mu.Unlock()
		now := time.Now()
		a := &e.Attempts[idx]
		a.Status, a.Latency = status, now.Sub(a.At)
		if reason == "" {
			s.settleAckLocked(e, answerPayload(answer), now)
		} else {
			s.attemptFailedLocked(e, reason, noRetry, now)
		}
		s.notifyLocked()
	}()
}

// answerPayload turns the body of an answer into an acknowledgement's
// payload: JSON as it is, text as a JSON string.
func answerPayload(b []byte) json.RawMessage {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}

// send posts a request and classifies the outcome as Slack does: reason
// is empty for a 200 in time.
func (s *Server) send(target string, h http.Header, body []byte) (status int, answer []byte, reason string, noRetry bool) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "unknown_error", false
	}
	req.Header = h.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return 0, nil, "http_timeout", false
		case errors.Is(err, syscall.ECONNREFUSED):
			return 0, nil, "connection_failed", false
		}
		return 0, nil, "unknown_error", false
	}
	defer resp.Body.Close()
	answer, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, nil, "http_timeout", false
	}
	noRetry = resp.Header.Get("X-Slack-No-Retry") == "1"
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, answer, "http_error", noRetry
	}
	return resp.StatusCode, answer, "", false
}

// HTTPResponse is what a Request URL answered.
type HTTPResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

func (s *Server) do(ctx context.Context, target string, h http.Header, body []byte) (HTTPResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return HTTPResponse{}, err
	}
	req.Header = h
	resp, err := s.client.Do(req)
	if err != nil {
		return HTTPResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return HTTPResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// SignedRequest is a request SendSigned posts: by default a fresh event
// callback (a message in no conversation the app knows) to the Events
// URL, signed now with the signing secret. Change a field to spoil it.
type SignedRequest struct {
	URL         string
	ContentType string
	Body        []byte
	// Secret signs the request instead of the signing secret (a forged
	// request); Timestamp is the time it claims (a stale one: ten minutes
	// ago); Signature, if set, is sent as it is; Unsigned leaves both
	// headers out.
	Secret    string
	Timestamp time.Time
	Signature string
	Unsigned  bool
	Header    http.Header
}

// SendSigned posts req as Slack would and returns the answer. It does
// not record an envelope: it is for testing the receiver's checks
// (NewSecretsVerifier refuses a bad signature, and a timestamp five
// minutes off).
func (s *Server) SendSigned(ctx context.Context, req SignedRequest) (HTTPResponse, error) {
	s.mu.Lock()
	if req.URL == "" && s.endpoints != nil {
		req.URL = s.endpoints.Events
	}
	if req.Body == nil {
		req.Body = s.sampleEventLocked()
	}
	s.mu.Unlock()
	if req.URL == "" {
		return HTTPResponse{}, errors.New("fakeslack: SendSigned: no URL and no UseHTTP endpoints")
	}
	if req.ContentType == "" {
		req.ContentType = "application/json"
	}
	if req.Secret == "" {
		req.Secret = s.opts.SigningSecret
	}
	if req.Timestamp.IsZero() {
		req.Timestamp = time.Now()
	}
	h := s.signedHeader(req.ContentType, req.Body, req.Timestamp, req.Secret)
	if req.Signature != "" {
		h.Set("X-Slack-Signature", req.Signature)
	}
	if req.Unsigned {
		h.Del("X-Slack-Signature")
		h.Del("X-Slack-Request-Timestamp")
	}
	for k, v := range req.Header {
		h[k] = v
	}
	return s.do(ctx, req.URL, h, req.Body)
}

// sampleEventLocked makes an event callback body that names no real
// message.
func (s *Server) sampleEventLocked() []byte {
	now := time.Now()
	ts := s.newTSLocked(now)
	b, _ := json.Marshal(map[string]any{
		"token":      s.opts.VerificationToken,
		"team_id":    s.team.ID,
		"api_app_id": s.bot.AppID,
		"type":       "event_callback",
		"event_id":   "Ev" + s.newIDLocked(""),
		"event_time": now.Unix(),
		"event": map[string]any{
			"type": "message", "channel": "C0", "channel_type": "channel",
			"user": "U0", "text": "sample", "ts": ts, "event_ts": ts,
		},
	})
	return b
}

// Replay sends the first attempt at an envelope again, byte for byte and
// with its original signature and timestamp, as an attacker who captured
// it would. The receiver should take it at most once (event_id), and
// refuse it once the timestamp is five minutes old.
func (s *Server) Replay(ctx context.Context, envelopeID string) (HTTPResponse, error) {
	s.mu.Lock()
	e := s.envByID[envelopeID]
	var a Attempt
	ok := e != nil && len(e.Attempts) > 0 && e.Attempts[0].URL != ""
	if ok {
		a = e.Attempts[0]
	}
	s.mu.Unlock()
	if !ok {
		return HTTPResponse{}, fmt.Errorf("fakeslack: Replay: no HTTP attempt at envelope %s", envelopeID)
	}
	return s.do(ctx, a.URL, a.Header.Clone(), a.Body)
}

// VerifyURL sends the url_verification challenge to the Events URL and
// checks the answer echoes it (as text, or as {"challenge": …}), as Slack
// does when the Request URL is saved.
func (s *Server) VerifyURL(ctx context.Context) error {
	s.mu.Lock()
	ep := s.endpoints
	s.mu.Unlock()
	if ep == nil {
		return errors.New("fakeslack: VerifyURL: no UseHTTP endpoints")
	}
	challenge := randomHex(24)
	body, _ := json.Marshal(map[string]any{"token": s.opts.VerificationToken, "challenge": challenge, "type": "url_verification"})
	resp, err := s.do(ctx, ep.Events, s.signedHeader("application/json", body, time.Now(), s.opts.SigningSecret), body)
	if err != nil {
		return err
	}
	if resp.Status != http.StatusOK {
		return fmt.Errorf("fakeslack: url_verification answered %d", resp.Status)
	}
	var obj struct {
		Challenge string `json:"challenge"`
	}
	got := string(bytes.TrimSpace(resp.Body))
	if json.Unmarshal(resp.Body, &obj) == nil && obj.Challenge != "" {
		got = obj.Challenge
	} else if v, err := url.ParseQuery(got); err == nil && v.Get("challenge") != "" {
		got = v.Get("challenge")
	}
	if got != challenge {
		return fmt.Errorf("fakeslack: url_verification answered %q, not the challenge", resp.Body)
	}
	return nil
}
