package discord

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"acpbroker/acp"
	"acpbroker/chat"
)

// Discord's bounds on one message's files, which a turn's attachments
// share: how many, and their bytes together.
const (
	messageFiles     = 10
	messageFileBytes = 10 << 20
)

// inlineDiff is the most characters of a diff shown in an answer; a
// longer diff is attached.
const inlineDiff = 1500

// attachLimits bound what a turn keeps to attach: one message's worth.
func (c *Client) attachLimits() chat.AttachLimits {
	return chat.AttachLimits{FileBytes: int64(c.cfg.MaxFileBytes), TotalBytes: messageFileBytes, Files: messageFiles, InlineDiff: inlineDiff}
}

// attachment is a file sent with an answer's message.
type attachment struct{ name, ctype, data string }

// loadAttachments makes the turn's attachments into files for one
// message: bytes the agent sent as they are, files it named read from
// the session's directory dir, within Discord's bounds for a message and
// max bytes a file. What is left out is said in notes.
func loadAttachments(dir string, atts []*chat.Attachment, max int64) (files []attachment, notes []string) {
	total := 0
	for _, a := range atts {
		data := string(a.Data)
		what := "`" + a.Name + "`"
		if a.Path != "" {
			what = "`" + a.Path + "`"
			b, err := readInside(dir, a.Path, max)
			if err != nil {
				notes = append(notes, what+" not attached: "+err.Error())
				continue
			}
			data = string(b)
		}
		switch {
		case len(files) >= messageFiles:
			notes = append(notes, fmt.Sprintf("%s not attached: a message holds %d files", what, messageFiles))
			continue
		case total+len(data) > messageFileBytes:
			notes = append(notes, fmt.Sprintf("%s not attached: a message holds %s of files", what, chat.Bytes(messageFileBytes)))
			continue
		}
		total += len(data)
		ctype := a.MimeType
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		files = append(files, attachment{name: a.Name, ctype: ctype, data: data})
	}
	return files, notes
}

// Why a file the agent named is not attached.
var (
	errOutside    = errors.New("outside the session's directory")
	errNotRegular = errors.New("not a regular file")
)

// readInside reads the regular file rel inside dir, of at most max
// bytes. Symbolic links are followed only while they stay inside dir;
// the file is opened without blocking, so a named pipe or a device is
// refused at once, never waited on.
func readInside(dir, rel string, max int64) ([]byte, error) {
	if dir == "" {
		return nil, errOutside
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errors.New("the session's directory cannot be opened")
	}
	defer root.Close()
	f, err := root.OpenFile(filepath.Clean(rel), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil && acp.IsPathEscape(err) {
		// An absolute link is refused by the root even when it names a
		// file inside: resolved, the path inside is opened through the
		// root again, so a link changed meanwhile still cannot lead out.
		if inner, ok := resolveInside(dir, rel); ok {
			f, err = root.OpenFile(inner, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist):
		return nil, errors.New("no such file")
	case acp.IsPathEscape(err):
		return nil, errOutside
	case errors.Is(err, syscall.ENXIO):
		return nil, errNotRegular
	default:
		return nil, errors.New("it cannot be opened")
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, errors.New("it cannot be read")
	}
	if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if st.Size() > max {
		return nil, fmt.Errorf("larger than %s", chat.Bytes(max))
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, errors.New("it cannot be read")
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("larger than %s", chat.Bytes(max))
	}
	return b, nil
}

// resolveInside resolves the symbolic links of rel in dir and returns the
// path it leads to relative to dir, if that is inside.
func resolveInside(dir, rel string) (string, bool) {
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false
	}
	real, err := filepath.EvalSymlinks(filepath.Join(dir, rel))
	if err != nil {
		return "", false
	}
	inner, err := filepath.Rel(realDir, real)
	if err != nil || inner == ".." || strings.HasPrefix(inner, ".."+string(filepath.Separator)) || filepath.IsAbs(inner) {
		return "", false
	}
	return inner, true
}

// filesPiece is the message that carries a turn's attachments: their
// names, what was left out and why, then the footer.
func filesPiece(files []attachment, notes []string, footer string) string {
	var b strings.Builder
	if len(files) > 0 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.name
		}
		b.WriteString("-# 📎 " + excerpt(strings.Join(names, ", "), 900) + "\n")
	}
	for i, n := range notes {
		if i == 5 {
			fmt.Fprintf(&b, "-# … and %d more not attached\n", len(notes)-i)
			break
		}
		b.WriteString("-# " + excerpt(n, 160) + "\n")
	}
	return b.String() + footer
}
