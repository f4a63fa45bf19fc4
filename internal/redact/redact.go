// Package redact hides known secret values in text that leaves the
// broker: an agent's stderr shown in a thread, log lines, reload diffs.
package redact

import (
	"slices"
	"strings"
)

// Mask replaces a secret value.
const Mask = "[redacted]"

// minLen is the shortest value treated as a secret: shorter ones (a "1",
// a "true") would blank out ordinary text.
const minLen = 6

// Redactor replaces every occurrence of its secret values. The zero value
// and a nil *Redactor change nothing. It is safe for concurrent use.
type Redactor struct {
	r *strings.Replacer
}

// New returns a Redactor for values; empty and very short ones are left
// out, and longer values are replaced before values they contain.
func New(values ...string) *Redactor {
	var keep []string
	for _, v := range values {
		if len(v) >= minLen && !slices.Contains(keep, v) {
			keep = append(keep, v)
		}
	}
	if len(keep) == 0 {
		return &Redactor{}
	}
	slices.SortFunc(keep, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(keep))
	for _, v := range keep {
		pairs = append(pairs, v, Mask)
	}
	return &Redactor{r: strings.NewReplacer(pairs...)}
}

// String returns s with every secret value masked.
func (r *Redactor) String(s string) string {
	if r == nil || r.r == nil {
		return s
	}
	return r.r.Replace(s)
}
