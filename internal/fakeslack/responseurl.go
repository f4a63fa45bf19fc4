package fakeslack

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// A response_url works five times within thirty minutes.
const (
	responseURLUses     = 5
	responseURLLifetime = 30 * time.Minute
)

// responseURL is where the app may answer an interaction or a command.
type responseURL struct {
	channel   string
	user      string
	messageTS string // the message acted on, "" for a command
	ephemeral bool
	threadTS  string
	created   time.Time
	uses      int
}

func (s *Server) newResponseURLLocked(r *responseURL, now time.Time) string {
	for id, old := range s.responses {
		if now.Sub(old.created) > responseURLLifetime {
			delete(s.responses, id)
		}
	}
	r.created = now
	id := s.team.ID + "/" + randomHex(12)
	s.responses[id] = r
	return s.URL() + "/response/" + id
}

// serveResponseURL takes a message posted to a response_url:
// replace_original or delete_original change the message acted on;
// otherwise a new message is shown, ephemeral unless response_type is
// in_channel.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	id := strings.TrimPrefix(r.URL.Path, "/response/")
	raw, _ := io.ReadAll(io.LimitReader(r.Body, maxAPIBody))
	rec := Call{At: now, Method: "response_url", Args: map[string]string{"body": string(raw)}, JSON: true, Size: len(raw)}
	s.mu.Lock()
	act, resp, hit := s.injectLocked(&rec)
	if !hit || act.stall > 0 {
		act.status = http.StatusOK
		resp = s.responseLocked(id, raw, now)
		if resp["ok"] != true {
			act.status = http.StatusNotFound
			if resp["error"] != "expired_url" {
				act.status = http.StatusBadRequest
			}
		}
	}
	if resp != nil {
		rec.OK, _ = resp["ok"].(bool)
		rec.Error, _ = resp["error"].(string)
	}
	rec.Status = act.status
	s.recordLocked(rec)
	s.mu.Unlock()
	s.answer(w, r, act, resp)
}

func (s *Server) responseLocked(id string, raw []byte, now time.Time) reply {
	ru := s.responses[id]
	if ru == nil || ru.uses >= responseURLUses || now.Sub(ru.created) > responseURLLifetime {
		return fail("expired_url")
	}
	ru.uses++
	var msg struct {
		Text            string            `json:"text"`
		Blocks          []json.RawMessage `json:"blocks"`
		ResponseType    string            `json:"response_type"`
		ReplaceOriginal bool              `json:"replace_original"`
		DeleteOriginal  bool              `json:"delete_original"`
		ThreadTS        string            `json:"thread_ts"`
	}
	if err := json.Unmarshal(raw, &msg); err != nil {
		return fail("invalid_payload")
	}
	ch := s.channels[ru.channel]
	if ch == nil {
		return fail("channel_not_found")
	}
	if (msg.ReplaceOriginal || msg.DeleteOriginal) && ru.messageTS == "" {
		return fail("no_original_message")
	}
	var blocks []json.RawMessage
	if msg.Blocks != nil {
		b, _ := json.Marshal(msg.Blocks)
		var problems []problem
		var ok bool
		if blocks, problems, ok = checkBlocks(b, "/blocks", 50, surfMessage); !ok || len(problems) > 0 {
			return fail("invalid_blocks")
		}
		blocks = withBlockIDs(blocks)
	}
	switch {
	case msg.DeleteOriginal && ru.ephemeral:
		if e := s.ephemeralLocked(ru); e != nil {
			e.Deleted = true
		}
	case msg.DeleteOriginal:
		m := s.messages[msgKey(ch.ID, ru.messageTS)]
		if m == nil || m.Deleted || !m.FromBot() {
			return fail("message_not_found")
		}
		s.deleteLocked(ch, m, now)
	case msg.ReplaceOriginal && ru.ephemeral:
		e := s.ephemeralLocked(ru)
		if e == nil {
			return fail("message_not_found")
		}
		e.Text, e.Blocks = msg.Text, blocks
		e.Replaced++
	case msg.ReplaceOriginal:
		m := s.messages[msgKey(ch.ID, ru.messageTS)]
		if m == nil || m.Deleted || !m.FromBot() {
			return fail("message_not_found")
		}
		prev := s.wireMessageLocked(m)
		m.Text, m.Blocks = msg.Text, blocks
		s.editedLocked(ch, m, prev, "response_url", now)
	default:
		th := msg.ThreadTS
		if th == "" {
			th = ru.threadTS
		}
		if bad := s.showLocked(ch, ru.user, th, msg.Text, msg.Blocks, msg.ResponseType == "in_channel", "response_url", now); bad != "" {
			return fail(bad)
		}
	}
	return okReply()
}

func (s *Server) ephemeralLocked(ru *responseURL) *Ephemeral {
	i := slices.IndexFunc(s.ephemerals, func(e *Ephemeral) bool {
		return e.Channel == ru.channel && e.User == ru.user && e.TS == ru.messageTS && !e.Deleted
	})
	if i < 0 {
		return nil
	}
	return s.ephemerals[i]
}
