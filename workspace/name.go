package workspace

import (
	"fmt"
	"net/url"
	"strings"
)

// maxThread bounds a thread id so that its escaped form (at most three
// bytes per byte) stays a legal file name.
const maxThread = 80

// branchPrefix is the namespace of the branches made for threads.
const branchPrefix = "acp/"

// escapeThread turns an untrusted thread id into a name that is both a
// single path element and a legal git ref component: letters, digits, '_'
// and an inner '-' stay, every other byte becomes %XX. The mapping is
// one-to-one, so two threads never share a worktree, and reversible, so
// List can give back the thread ids. A Discord snowflake stays as it is.
func escapeThread(thread string) (string, error) {
	if thread == "" {
		return "", &wordedError{msg: "the thread id is empty", kind: ErrBadThread}
	}
	if len(thread) > maxThread {
		return "", &wordedError{msg: fmt.Sprintf("the thread id is longer than %d bytes", maxThread), kind: ErrBadThread}
	}
	var b strings.Builder
	for i := 0; i < len(thread); i++ {
		c := thread[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' && i > 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String(), nil
}

// unescapeThread reverses escapeThread; ok is false for a name that
// escapeThread cannot have made.
func unescapeThread(name string) (thread string, ok bool) {
	t, err := url.PathUnescape(name)
	if err != nil {
		return "", false
	}
	if e, err := escapeThread(t); err != nil || e != name {
		return "", false
	}
	return t, true
}
