package thread

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"acpbroker/acp"
	"acpbroker/chat"
)

// textExts are attachments inlined as text whatever their content type.
var textExts = []string{".md", ".txt", ".log", ".go", ".py", ".js", ".ts", ".tsx", ".jsx", ".rs", ".java", ".kt", ".c", ".h",
	".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".sh", ".bash", ".zsh", ".ps1", ".json", ".yaml", ".yml", ".toml",
	".ini", ".cfg", ".conf", ".xml", ".html", ".css", ".scss", ".sql", ".csv", ".tsv", ".diff", ".patch", ".proto", ".graphql"}

// attachments turns a message's files into prompt content: text files
// inlined, images as image blocks, each downloaded by the platform.
// Anything over a limit or of another kind refuses the whole message,
// with the reason in words, so the user can send it again without it.
// A file the platform refused to fetch is left out, and said so in
// skipped.
func (s *Server) attachments(ctx context.Context, files []Attachment) (text, images []acp.ContentBlock, skipped []string, refusal string) {
	for _, a := range files {
		if a.Refused != "" {
			skipped = append(skipped, fmt.Sprintf("I did not pass %q to the agent: %s.", a.Name, a.Refused))
			continue
		}
		ctype, _, _ := strings.Cut(a.Type, ";")
		isImage := strings.HasPrefix(ctype, "image/")
		isText := strings.HasPrefix(ctype, "text/") || ctype == "application/json" ||
			slices.Contains(textExts, strings.ToLower(filepath.Ext(a.Name)))
		limit := s.cfg.MaxTextBytes
		kind := "text files"
		switch {
		case isImage:
			limit, kind = s.cfg.MaxImageBytes, "images"
		case !isText:
			return nil, nil, nil, fmt.Sprintf("I can't pass %q (%s) to the agent: only images and text files can be attached. Nothing was sent; please try again without it.", a.Name, orUnknown(ctype))
		}
		if a.Size > limit {
			return nil, nil, nil, fmt.Sprintf("%q is %s; the limit for %s is %s. Nothing was sent; please try again with a smaller file.", a.Name, size(a.Size), kind, size(limit))
		}
		body, err := s.download(ctx, a, limit)
		if err != nil {
			return nil, nil, nil, fmt.Sprintf("I could not read %q: %v. Nothing was sent; please try again.", a.Name, err)
		}
		if isImage {
			images = append(images, acp.ContentBlock{Type: "image", MimeType: ctype, Data: base64.StdEncoding.EncodeToString(body)})
			continue
		}
		if !utf8.Valid(body) {
			return nil, nil, nil, fmt.Sprintf("%q is not UTF-8 text. Nothing was sent; please try again without it.", a.Name)
		}
		name := strings.ToValidUTF8(a.Name, "\uFFFD") // a name is text for the agent too
		text = append(text, acp.TextBlock(fmt.Sprintf("Attached file %s:\n```\n%s\n```", name, strings.TrimRight(string(body), "\n"))))
	}
	return text, images, skipped, ""
}

// download fetches a file through the platform, holding it to limit
// whatever the platform does.
func (s *Server) download(ctx context.Context, a Attachment, limit int64) ([]byte, error) {
	body, err := s.p.Download(ctx, a, limit)
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("it is larger than the limit of %s", size(limit))
	}
	return body, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown type"
	}
	return s
}

// size prints a byte count for people.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// attachLimits bound what a turn keeps to attach: one message's worth.
func (s *Server) attachLimits() chat.AttachLimits {
	return chat.AttachLimits{FileBytes: int64(s.cfg.MaxFileBytes), TotalBytes: s.lim.FilesBytes, Files: s.lim.Files, InlineDiff: s.lim.InlineDiff}
}

// loadAttachments makes the turn's attachments into files for one
// message: bytes the agent sent as they are, files it named read from
// the session's directory dir, within lim's bounds for a message and
// max bytes a file. What is left out is said in notes.
func loadAttachments(dir string, atts []*chat.Attachment, max int64, lim Limits) (files []File, notes []string) {
	var total int64
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
		case len(files) >= lim.Files:
			notes = append(notes, fmt.Sprintf("%s not attached: a message holds %d files", what, lim.Files))
			continue
		case total+int64(len(data)) > lim.FilesBytes:
			notes = append(notes, fmt.Sprintf("%s not attached: a message holds %s of files", what, chat.Bytes(lim.FilesBytes)))
			continue
		}
		total += int64(len(data))
		ctype := a.MimeType
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		files = append(files, File{Name: a.Name, Type: ctype, Data: data})
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
func filesPiece(files []File, notes []string, footer string) string {
	var b strings.Builder
	if len(files) > 0 {
		names := make([]string, len(files))
		for i, f := range files {
			names[i] = f.Name
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
