package chat

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"acpbroker/acp"
)

// Attachment is something the agent showed that the chat may attach to
// the turn's answer: bytes the agent sent (Data), or a file it named
// inside the session's directory (Path, relative to it, read only when
// attached, and only if it is a regular file still inside it).
type Attachment struct {
	Name     string
	MimeType string
	Data     []byte
	Path     string

	size    int64 // counted into the Transcript's bytes held
	dropped bool  // replaced by a later update of its tool call
}

// AttachLimits bound what a Transcript keeps to attach. The zero value
// keeps nothing: what the agent shows is described in words, and diffs
// are shown whole.
type AttachLimits struct {
	// FileBytes bounds one attachment, TotalBytes all the bytes a turn's
	// agent sent inline that are kept, Files the number of attachments.
	FileBytes, TotalBytes int64
	Files                 int
	// InlineDiff is the most characters of a diff shown in the text; a
	// longer one is attached as <name>.diff.
	InlineDiff int
}

// shownItem is one item of a tool call's content as shown: its lines,
// and what it attaches.
type shownItem struct {
	text string
	att  *Attachment
}

// Attachments are what the transcript keeps to attach, in the order the
// agent showed them.
func (t *Transcript) Attachments() []*Attachment {
	var out []*Attachment
	for _, a := range t.files {
		if !a.dropped {
			out = append(out, a)
		}
	}
	return out
}

// message shows a non-text block of the answer on a line of its own.
func (t *Transcript) message(b *acp.ContentBlock) bool {
	line, _ := t.block(b)
	if line == "" {
		return false
	}
	if !t.lineEnded {
		t.writeAnswer("\n")
	}
	t.writeAnswer(line + "\n")
	return true
}

// ContentSum tells a tool call's content list from another without
// keeping it: equal sums, equal content.
type ContentSum struct {
	n   int
	sum [sha256.Size]byte
}

// SumContent is content's ContentSum.
func SumContent(content []acp.ToolCallContent) ContentSum {
	h := sha256.New()
	for _, c := range content {
		_ = json.NewEncoder(h).Encode(c)
	}
	var s ContentSum
	s.n = len(content)
	h.Sum(s.sum[:0])
	return s
}

// toolContent replaces what a tool call shows with its new content list.
func (t *Transcript) toolContent(l *toolLine, content []acp.ToolCallContent) {
	sum := SumContent(content)
	if l.content == sum {
		return // the same content sent again
	}
	for _, it := range l.shown {
		t.release(it.att)
	}
	l.content, l.shown = sum, nil
	for _, c := range content {
		var it shownItem
		switch c.Type {
		case "diff":
			it.text, it.att = t.diff(c)
		case "content":
			if c.Content != nil && c.Content.Type != "text" {
				it.text, it.att = t.block(c.Content)
			}
		}
		if it.text != "" {
			l.shown = append(l.shown, it)
		}
	}
}

// block describes a content block in a line, keeping what can be
// attached; text and unknown types give "".
func (t *Transcript) block(b *acp.ContentBlock) (string, *Attachment) {
	switch b.Type {
	case "image", "audio":
		if b.Data == "" {
			if b.URI != "" {
				return "🖼️ `" + oneLine(b.URI, 300) + "`", nil // a link, never fetched
			}
			return "", nil
		}
		t.seq++
		name := fmt.Sprintf("%s-%d.%s", b.Type, t.seq, extension(b.MimeType))
		return t.inline(name, b.MimeType, b.Data, true)
	case "resource":
		r := b.Resource
		if r == nil {
			return "", nil
		}
		t.seq++
		name := fileName(r.URI, fmt.Sprintf("resource-%d.txt", t.seq))
		if r.Blob != "" {
			return t.inline(name, r.MimeType, r.Blob, true)
		}
		return t.inline(name, r.MimeType, r.Text, false)
	case "resource_link":
		label := b.Name
		if label == "" {
			label = b.URI
		}
		rel, local := t.local(b.URI)
		switch {
		case !local:
			return "🔗 " + oneLine(label, 100) + ": `" + oneLine(b.URI, 300) + "`", nil
		case rel == "":
			return "🔗 `" + oneLine(filePath(b.URI), 300) + "` (outside the session's directory; not attached)", nil
		}
		a := &Attachment{Name: fileName(rel, "file"), MimeType: b.MimeType, Path: rel}
		if why := t.take(a, 0); why != "" {
			return "📎 `" + oneLine(rel, 200) + "` (not attached: " + why + ")", nil
		}
		return "📎 `" + oneLine(rel, 200) + "`", a
	}
	return "", nil
}

// inline keeps bytes the agent sent, base64 or plain, within the limits.
func (t *Transcript) inline(name, mimeType, data string, b64 bool) (string, *Attachment) {
	size := int64(len(data))
	if b64 {
		size = int64(base64.StdEncoding.DecodedLen(len(data)))
	}
	a := &Attachment{Name: name, MimeType: mimeType}
	if why := t.take(a, size); why != "" {
		return fmt.Sprintf("📎 `%s` (%s, not attached: %s)", name, Bytes(size), why), nil
	}
	if b64 {
		raw, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			t.release(a)
			return fmt.Sprintf("📎 `%s` (not attached: its data is not base64)", name), nil
		}
		a.Data = raw
	} else {
		a.Data = []byte(data)
	}
	return fmt.Sprintf("📎 `%s` (%s)", name, Bytes(int64(len(a.Data)))), a
}

// diff shows a diff item: inline as a diff block when short enough,
// else attached as <name>.diff.
func (t *Transcript) diff(c acp.ToolCallContent) (string, *Attachment) {
	name := c.Path
	if rel, _ := t.local(c.Path); rel != "" {
		name = filepath.ToSlash(rel)
	}
	d := UnifiedDiff(name, c.OldText, c.NewText)
	if d.Text == "" {
		return "`" + oneLine(name, 200) + "`: no change", nil
	}
	counts := fmt.Sprintf("+%d −%d", d.Added, d.Removed)
	inline := t.Limits.InlineDiff
	if inline <= 0 {
		inline = maxInlineDiff
	}
	if runeLen(d.Text) <= inline {
		return "```diff\n" + strings.ReplaceAll(d.Text, "```", "`\u200b``") + "```", nil
	}
	if t.Limits.InlineDiff <= 0 {
		// Nothing is attached: the start of the diff is shown.
		cut := strings.LastIndexByte(d.Text[:runeOffset(d.Text, inline)], '\n') + 1
		return "```diff\n" + strings.ReplaceAll(d.Text[:cut], "```", "`\u200b``") + "```\n" +
			fmt.Sprintf("-# … the diff of `%s` goes on (%s lines, %s in all)", oneLine(name, 200), counts, Bytes(int64(len(d.Text)))), nil
	}
	text := d.Text
	if max := t.Limits.FileBytes; max > 0 && int64(len(text)) > max {
		cut := strings.LastIndexByte(text[:max-200], '\n') + 1
		text = text[:cut] + fmt.Sprintf("… the diff goes on: %s in all, more than the %s attached\n", Bytes(int64(len(d.Text))), Bytes(max))
	}
	a := &Attachment{Name: fileName(name, "file") + ".diff", MimeType: "text/x-diff"}
	if why := t.take(a, int64(len(text))); why != "" {
		return fmt.Sprintf("📝 `%s` (%s lines; not attached: %s)", oneLine(name, 200), counts, why), nil
	}
	a.Data = []byte(text)
	return fmt.Sprintf("📎 `%s` (%s lines)", a.Name, counts), a
}

// take counts a into the limits, or says why it does not fit.
func (t *Transcript) take(a *Attachment, size int64) string {
	l := t.Limits
	switch {
	case l.Files <= 0:
		return "attachments are off"
	case len(t.Attachments()) >= l.Files:
		return fmt.Sprintf("more than %d files", l.Files)
	case size > l.FileBytes:
		return "larger than " + Bytes(l.FileBytes)
	case t.held+size > l.TotalBytes:
		return "this answer's attachments are full"
	}
	a.size = size
	t.held += size
	t.files = append(t.files, a)
	return ""
}

// release gives back what a replaced attachment held: its bytes, and its
// place among the files.
func (t *Transcript) release(a *Attachment) {
	if a == nil || a.dropped {
		return
	}
	a.dropped, a.Data = true, nil
	t.held -= a.size
	t.files = slices.DeleteFunc(t.files, func(f *Attachment) bool { return f == a })
}

// local maps what the agent named (a path, or a file: URI) to a path
// relative to the session's directory: "" with local true when it is on
// this machine but outside the directory, local false for any other URI,
// which is shown, never fetched.
func (t *Transcript) local(uri string) (rel string, local bool) {
	p := filePath(uri)
	if p == "" {
		return "", false
	}
	return InDir(t.Dir, p), true
}

// InDir is path p (relative paths taken from dir) relative to dir, or ""
// when it is not inside dir, by its name alone.
func InDir(dir, p string) string {
	if dir == "" || p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	r, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return ""
	}
	return r
}

// filePath is the local path a URI names: a file: URI's path, or the
// text itself when it has no scheme; "" for anything else.
func filePath(uri string) string {
	u, err := url.Parse(uri)
	switch {
	case err == nil && u.Scheme == "file":
		if u.Host != "" && u.Host != "localhost" {
			return ""
		}
		return u.Path
	case err == nil && len(u.Scheme) > 1:
		return ""
	case strings.Contains(uri, "://"):
		return ""
	}
	return uri
}

// fileName is a safe attachment name from a path or URI's last element.
func fileName(p, fallback string) string {
	if fp := filePath(p); fp != "" {
		p = fp
	} else if u, err := url.Parse(p); err == nil {
		p = u.Path
	}
	base := path.Base(filepath.ToSlash(p))
	var b strings.Builder
	for _, r := range base {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := strings.TrimLeft(b.String(), ".")
	if name == "" || strings.Trim(name, "_") == "" {
		return fallback
	}
	if len(name) > 80 {
		name = name[len(name)-80:]
	}
	return name
}

var extensions = map[string]string{
	"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp", "image/svg+xml": "svg",
	"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/ogg": "ogg", "audio/webm": "webm",
}

func extension(mimeType string) string {
	if e, ok := extensions[strings.ToLower(mimeType)]; ok {
		return e
	}
	return "bin"
}

// Bytes is a size for people: 512 B, 12.3 KiB, 8.0 MiB, 1.2 GiB.
func Bytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
}
