package fakeslack

import (
	"encoding/json"
	"slices"
	"time"
)

// streamPiece is what one streaming call brings.
type streamPiece struct {
	markdown  string
	chunks    json.RawMessage
	text      string            // markdown added to the message's text
	blocks    []json.RawMessage // blocks added by blocks chunks
	hasMD     bool
	hasChunks bool
}

func (p streamPiece) mode() string {
	switch {
	case p.hasMD:
		return "markdown_text"
	case p.hasChunks:
		return "chunks"
	}
	return ""
}

// streamPieceLocked reads markdown_text and chunks.
func (s *Server) streamPieceLocked(c *call) (streamPiece, reply) {
	var p streamPiece
	p.markdown, p.hasMD = c.args["markdown_text"]
	raw, hasChunks := c.jsonArg("chunks")
	if p.hasMD && hasChunks {
		return p, fail("cannot_provide_both_markdown_text_and_chunks")
	}
	if chars(p.markdown) > 12000 {
		return p, fail("msg_too_long")
	}
	p.text = p.markdown
	if hasChunks {
		p.hasChunks = true
		p.chunks = raw
		var list []map[string]json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			return p, fail("invalid_chunks")
		}
		for _, ch := range list {
			var typ, text string
			json.Unmarshal(ch["type"], &typ)
			switch typ {
			case "markdown_text":
				if json.Unmarshal(ch["text"], &text) != nil {
					return p, fail("invalid_chunks")
				}
				if chars(text) > 12000 {
					return p, fail("msg_too_long")
				}
				p.text += text
			case "task_update", "plan_update":
				var title string
				if json.Unmarshal(ch["title"], &title) != nil || title == "" {
					return p, fail("invalid_chunks")
				}
			case "blocks":
				blocks, problems, ok := checkBlocks(ch["blocks"], "/chunks/blocks", 50, surfStream)
				switch {
				case !ok:
					return p, fail("invalid_chunks")
				case len(blocks) > 50:
					return p, fail("msg_blocks_too_many")
				case len(problems) > 0:
					return p, failMessages("invalid_blocks", problems)
				}
				p.blocks = append(p.blocks, withBlockIDs(blocks)...)
			default:
				return p, fail("invalid_chunks")
			}
		}
	}
	return p, nil
}

func (s *Server) startStream(c *call) reply {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return errReply
	}
	if ch.Archived {
		return fail("is_archived")
	}
	st := &Stream{State: "streaming", RecipientUser: c.str("recipient_user_id"), RecipientTeam: c.str("recipient_team_id"), Started: c.now}
	if ch.Kind != IM {
		switch {
		case st.RecipientTeam == "":
			return fail("missing_recipient_team_id")
		case st.RecipientUser == "":
			return fail("missing_recipient_user_id")
		}
	}
	if st.RecipientUser != "" && s.users[st.RecipientUser] == nil {
		return fail("user_not_found")
	}
	p, errReply := s.streamPieceLocked(c)
	if errReply != nil {
		return errReply
	}
	st.Mode = p.mode()
	m := s.botMessageLocked(ch, content{text: p.text, blocks: p.blocks}, c.now)
	m.Stream = st
	if th := c.str("thread_ts"); th != "" {
		if m.parent = s.parentLocked(ch, th); m.parent == "" {
			m.UnthreadedFrom = th
		}
	}
	st.Appends = []StreamAppend{{At: c.now, Method: "chat.startStream", MarkdownText: p.markdown, Chunks: p.chunks}}
	s.addMessageLocked(ch, m, "chat.startStream")
	s.botPostedLocked(ch, m)
	return okReply("channel", ch.ID, "ts", m.TS)
}

// streamOf finds a streaming message of the bot for appendStream and
// stopStream.
func (s *Server) streamOf(c *call) (*channel, *message, reply) {
	ch, errReply := s.channelLocked(c.str("channel"), false)
	if errReply != nil {
		return nil, nil, errReply
	}
	m := s.messages[msgKey(ch.ID, c.str("ts"))]
	switch {
	case m == nil || m.Deleted:
		return nil, nil, fail("message_not_found")
	case !m.FromBot():
		return nil, nil, fail("message_not_owned_by_app")
	case m.Stream == nil:
		return nil, nil, fail("message_not_in_streaming_state")
	case m.Stream.State == "stopped_by_user":
		return nil, nil, fail("stopped_by_user")
	case m.Stream.State != "streaming" || s.streamExpiredLocked(m, c.now):
		return nil, nil, fail("message_not_in_streaming_state")
	}
	return ch, m, nil
}

// streamExpiredLocked ends a stream older than Options.StreamLifetime
// and reports whether it did.
func (s *Server) streamExpiredLocked(m *message, now time.Time) bool {
	st := m.Stream
	if st == nil || st.State != "streaming" || now.Sub(st.Started) <= s.opts.StreamLifetime {
		return false
	}
	st.State = "expired"
	st.Ended = st.Started.Add(s.opts.StreamLifetime)
	return true
}

func (s *Server) appendStream(c *call) reply {
	ch, m, errReply := s.streamOf(c)
	if errReply != nil {
		return errReply
	}
	p, errReply := s.streamPieceLocked(c)
	if errReply != nil {
		return errReply
	}
	if p.mode() == "" {
		return fail("markdown_text_or_chunks_required")
	}
	if m.Stream.Mode != "" && m.Stream.Mode != p.mode() {
		return fail("streaming_mode_mismatch")
	}
	m.Stream.Mode = p.mode()
	m.Text += p.text
	m.Blocks = append(m.Blocks, p.blocks...)
	m.Stream.Appends = append(m.Stream.Appends, StreamAppend{At: c.now, Method: "chat.appendStream", MarkdownText: p.markdown, Chunks: p.chunks})
	return okReply("channel", ch.ID, "ts", m.TS)
}

func (s *Server) stopStream(c *call) reply {
	ch, m, errReply := s.streamOf(c)
	if errReply != nil {
		return errReply
	}
	p, errReply := s.streamPieceLocked(c)
	if errReply != nil {
		return errReply
	}
	if p.mode() != "" && m.Stream.Mode != "" && m.Stream.Mode != p.mode() {
		return fail("streaming_mode_mismatch")
	}
	var blocks []json.RawMessage
	if raw, ok := c.jsonArg("blocks"); ok {
		var problems []problem
		var formatOK bool
		blocks, problems, formatOK = checkBlocks(raw, "/blocks", 50, surfMessage)
		switch {
		case !formatOK:
			return fail("invalid_blocks")
		case len(blocks) > 50:
			return fail("msg_blocks_too_many")
		case len(problems) > 0:
			return failMessages("invalid_blocks", problems)
		}
	}
	if raw, ok := c.jsonArg("metadata"); ok && json.Valid(raw) {
		m.Metadata = raw
	}
	m.Text += p.text
	m.Blocks = append(append(m.Blocks, p.blocks...), withBlockIDs(blocks)...)
	st := m.Stream
	st.State = "stopped"
	st.Ended = c.now
	st.Appends = append(st.Appends, StreamAppend{At: c.now, Method: "chat.stopStream", MarkdownText: p.markdown, Chunks: p.chunks})
	m.revisions = append(m.revisions, Revision{At: c.now, Text: m.Text, Blocks: slices.Clone(m.Blocks), Method: "chat.stopStream"})
	return okReply("channel", ch.ID, "ts", m.TS, "message", s.wireMessageLocked(m))
}

// StopStreamAsUser has the user press stop on a streaming message:
// later appends are answered stopped_by_user.
func (s *Server) StopStreamAsUser(channelID, ts string) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.messages[msgKey(channelID, ts)]
	if m == nil || m.Stream == nil || m.Stream.State != "streaming" {
		s.errorf("StopStreamAsUser: no streaming message %s in %s", ts, channelID)
		return
	}
	m.Stream.State = "stopped_by_user"
	m.Stream.Ended = time.Now()
	s.notifyLocked()
}
