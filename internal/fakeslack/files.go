package fakeslack

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

type file struct {
	File
	uploaded bool // its bytes arrived
	shared   bool
	url      string // what its url_private says, if not its address on the fake
}

func (f *file) snapshot() File {
	out := f.File
	out.Data = slices.Clone(f.Data)
	return out
}

// upload is an upload URL handed out and not yet completed.
type upload struct {
	fileID  string
	created time.Time
}

// uploadLifetime is how long an upload URL waits for completion before
// the fake forgets it.
const uploadLifetime = 10 * time.Minute

func (s *Server) getUploadURL(c *call) reply {
	name := c.str("filename")
	length, err := strconv.ParseInt(c.str("length"), 10, 64)
	switch {
	case name == "" || err != nil || length <= 0:
		return fail("missing_argument")
	case length > s.opts.MaxFileSize:
		return fail("file_upload_size_restricted")
	case chars(c.str("alt_txt")) > 1000:
		return fail("alt_txt_too_large")
	case c.str("snippet_type") != "" && length > 1<<20:
		return fail("snippet_too_large")
	}
	for t, u := range s.uploads {
		if c.now.Sub(u.created) > uploadLifetime {
			delete(s.uploads, t)
			if f := s.files[u.fileID]; f != nil && !f.shared {
				s.forgetFileLocked(f.ID)
			}
		}
	}
	f := &file{File: File{ID: s.newIDLocked("F"), Name: name, Title: name, Size: int(length), User: s.bot.UserID, AltText: c.str("alt_txt"), Created: c.now}}
	f.Filetype, f.Mimetype = filetypeOf(name)
	s.files[f.ID] = f
	s.forder = append(s.forder, f.ID)
	ticket := randomHex(16)
	s.uploads[ticket] = &upload{fileID: f.ID, created: c.now}
	return okReply("upload_url", s.URL()+"/upload/v1/"+ticket, "file_id", f.ID)
}

func (s *Server) forgetFileLocked(id string) {
	delete(s.files, id)
	s.forder = slices.DeleteFunc(s.forder, func(x string) bool { return x == id })
}

// serveUpload takes the bytes of a file at its upload URL, raw or as a
// multipart form's file.
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	ticket := strings.TrimPrefix(r.URL.Path, "/upload/v1/")
	raw, _ := io.ReadAll(io.LimitReader(r.Body, s.opts.MaxFileSize+1<<20))
	data := raw
	if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		mr := multipart.NewReader(bytes.NewReader(raw), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			if part.FileName() != "" || part.FormName() == "file" {
				data, _ = io.ReadAll(part)
				break
			}
		}
	}
	rec := Call{At: now, Method: "upload", Args: map[string]string{"ticket": ticket}, Size: len(raw)}
	s.mu.Lock()
	act, _, hit := s.injectLocked(&rec)
	if !hit || act.stall > 0 {
		u := s.uploads[ticket]
		switch {
		case u == nil || s.files[u.fileID] == nil:
			act.status = http.StatusNotFound
		case int64(len(data)) > s.opts.MaxFileSize:
			act.status = http.StatusRequestEntityTooLarge
		default:
			f := s.files[u.fileID]
			f.Data, f.uploaded = slices.Clone(data), true
			act.status = http.StatusOK
			rec.OK = true
		}
	}
	rec.Status = act.status
	s.recordLocked(rec)
	s.mu.Unlock()
	s.respond(w, r, act, "text/plain; charset=utf-8", []byte("OK - "+strconv.Itoa(len(data))))
}

func (s *Server) completeUpload(c *call) reply {
	raw, _ := c.jsonArg("files")
	var list []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return failMessages("invalid_arguments", []problem{{"missing required field: files", "/files"}})
	}
	var files []*file
	for _, it := range list {
		f := s.files[it.ID]
		if f == nil || !f.uploaded || f.shared {
			return fail("file_not_found")
		}
		files = append(files, f)
	}
	chID := c.str("channel_id")
	if chs := c.str("channels"); chID == "" && chs != "" {
		ids := strings.Split(chs, ",")
		if len(ids) > 100 {
			return fail("channels_limit_exceeded")
		}
		chID = ids[0]
	}
	var ch *channel
	if chID != "" {
		var errReply reply
		if ch, errReply = s.channelLocked(chID, false); errReply != nil {
			return errReply
		}
	}
	var blocks []json.RawMessage
	if braw, ok := c.jsonArg("blocks"); ok && c.str("initial_comment") == "" {
		var problems []problem
		var formatOK bool
		blocks, problems, formatOK = checkBlocks(braw, "/blocks", 50, surfMessage)
		if !formatOK || len(problems) > 0 {
			return fail("invalid_blocks")
		}
	}
	for t, u := range s.uploads {
		for _, it := range list {
			if u.fileID == it.ID {
				delete(s.uploads, t)
			}
		}
	}
	out := []any{}
	for i, f := range files {
		f.shared = true
		if list[i].Title != "" {
			f.Title = list[i].Title
		}
		out = append(out, map[string]any{"id": f.ID, "title": f.Title})
	}
	if ch != nil {
		m := s.botMessageLocked(ch, content{text: c.str("initial_comment"), blocks: withBlockIDs(blocks)}, c.now)
		m.Subtype = "file_share"
		if th := c.str("thread_ts"); th != "" {
			if m.parent = s.parentLocked(ch, th); m.parent == "" {
				m.UnthreadedFrom = th
			}
		}
		for _, f := range files {
			m.Files = append(m.Files, f.ID)
			f.Channel, f.ThreadTS, f.MessageTS = ch.ID, m.parent, m.TS
		}
		s.addMessageLocked(ch, m, "files.completeUploadExternal")
		for _, f := range files {
			s.botEventLocked(s.fileSharedEvent(f, c.now))
		}
		s.botPostedLocked(ch, m)
	}
	return okReply("files", out)
}

func (s *Server) fileSharedEvent(f *file, now time.Time) map[string]any {
	return map[string]any{
		"type":       "file_shared",
		"channel_id": f.Channel,
		"file_id":    f.ID,
		"user_id":    f.User,
		"file":       map[string]any{"id": f.ID},
		"event_ts":   s.newTSLocked(now),
	}
}

func (s *Server) fileInfo(c *call) reply {
	f := s.files[c.str("file")]
	if f == nil || !f.uploaded || !s.botSeesLocked(f) {
		return fail("file_not_found")
	}
	return okReply("file", s.wireFileLocked(f), "comments", []any{},
		"paging", map[string]any{"count": 100, "total": 1, "page": 1, "pages": 1})
}

// botSeesLocked reports whether the bot may read a file: its own, or one
// shared where it is.
func (s *Server) botSeesLocked(f *file) bool {
	if f.User == s.bot.UserID {
		return true
	}
	ch := s.channels[f.Channel]
	return ch != nil && !ch.BotAbsent
}

// serveFile serves url_private and url_private_download to the bot
// token. Without it, as on Slack, the answer is a redirect to the
// sign-in page, which slack-go's GetFile recognises.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	rest := strings.TrimPrefix(r.URL.Path, "/files-pri/")
	key, _, _ := strings.Cut(rest, "/")
	fileID := key[strings.IndexByte(key, '-')+1:]
	rec := Call{At: now, Method: "file", Args: map[string]string{"file": fileID}}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	s.mu.Lock()
	switch tok {
	case s.opts.BotToken:
		rec.Token = "bot"
	case "":
	default:
		rec.Token = "invalid"
	}
	act, _, hit := s.injectLocked(&rec)
	var data []byte
	var ctype string
	redirect := false
	if !hit || act.stall > 0 {
		f := s.files[fileID]
		switch {
		case f == nil || !f.uploaded:
			act.status = http.StatusNotFound
		case rec.Token != "bot" || !s.botSeesLocked(f):
			redirect = true
			act.status = http.StatusFound
		default:
			f.Downloads++
			data, ctype = f.Data, f.Mimetype
			act.status = http.StatusOK
			rec.OK = true
		}
	}
	rec.Status = act.status
	s.recordLocked(rec)
	s.mu.Unlock()
	if redirect {
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	if act.status == http.StatusNotFound {
		data, ctype = []byte("Not Found"), "text/plain; charset=utf-8"
	}
	s.respond(w, r, act, ctype, data)
}

// serveSignin is the page a download without the token lands on.
func (s *Server) serveSignin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, "<html><body>Sign in to "+s.team.Name+"</body></html>")
}
