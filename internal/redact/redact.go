// Package redact hides known secret values in text that leaves the
// broker: an agent's stderr shown in a thread, log lines, reload diffs.
package redact

import (
	"slices"
	"strings"
	"sync/atomic"
)

// Mask replaces a secret value.
const Mask = "[redacted]"

// minLen is the shortest value treated as a secret: shorter ones (a "1",
// a "true") would blank out ordinary text.
const minLen = 6

// Redactor replaces every occurrence of its secret values. The zero value
// and a nil *Redactor change nothing. It is safe for concurrent use.
type Redactor struct {
	set atomic.Pointer[secrets]
}

// secrets are a Redactor's values, longest first, and their replacer.
type secrets struct {
	values []string
	r      *strings.Replacer
}

// New returns a Redactor for values; empty and very short ones are left
// out, and longer values are replaced before values they contain.
func New(values ...string) *Redactor {
	r := &Redactor{}
	r.Add(values...)
	return r
}

// Add makes values secret too (a reload's new API keys): text masked from
// then on hides them as well as the earlier ones. A value once secret
// stays so.
func (r *Redactor) Add(values ...string) {
	for {
		old := r.set.Load()
		var keep []string
		if old != nil {
			keep = slices.Clone(old.values)
		}
		n := len(keep)
		for _, v := range values {
			if len(v) >= minLen && !slices.Contains(keep, v) {
				keep = append(keep, v)
			}
		}
		if len(keep) == n {
			return
		}
		slices.SortFunc(keep, func(a, b string) int { return len(b) - len(a) })
		pairs := make([]string, 0, 2*len(keep))
		for _, v := range keep {
			pairs = append(pairs, v, Mask)
		}
		if r.set.CompareAndSwap(old, &secrets{values: keep, r: strings.NewReplacer(pairs...)}) {
			return
		}
	}
}

// String returns s with every secret value masked.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	set := r.set.Load()
	if set == nil {
		return s
	}
	return set.r.Replace(s)
}
