// Package safename turns a name from outside (a thread's id, an agent's
// profile) into one directory name: what is not a letter, a digit, '-'
// or '_' becomes '_', so it names no other directory and holds no path.
package safename

import "strings"

// Of is s as a directory name of at most max bytes (0: no bound), or
// empty when s gives none.
func Of(s string, max int, empty string) string {
	var b strings.Builder
	for _, r := range s {
		if max > 0 && b.Len() >= max {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return empty
	}
	return b.String()
}
