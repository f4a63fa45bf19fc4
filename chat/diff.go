package chat

import (
	"fmt"
	"strings"
)

// The diff is ours, not a library's, for its bounds: an agent can write
// files of any size, and showing its edit must take bounded time and
// memory whatever the texts, and the same diff on any machine.
// pmezard/go-difflib's SequenceMatcher has no bound on its work (its
// longest-match search is quadratic in the worst case); sergi/go-diff
// bounds its search by a wall-clock deadline, so a loaded machine shows
// a different diff, and bounds neither the edit length nor the memory.
// Here diffWork and diffMaxEdits bound both, and past them the diff is
// still correct, only not the smallest.

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// diffWork bounds the work of finding a shortest edit: past it, the part
// that differs is shown as removed and added whole, which is still a
// correct diff, only not the smallest.
const diffWork = 20_000_000

// diffMaxEdits bounds the length of the edit searched for. The walk back
// keeps one row per step of the search, so the memory it takes grows
// with the square of this: 1024 keeps it near 4 MiB, whatever the texts.
const diffMaxEdits = 1024

// Diff is a unified diff of one file.
type Diff struct {
	// Text is the diff: "---" and "+++" headers, then hunks; empty when
	// the texts are equal.
	Text           string
	Added, Removed int
}

// UnifiedDiff compares a file's old text with its new one; old is nil for
// a new file, which shows as all additions. name is the file's name in
// the headers.
func UnifiedDiff(name string, old *string, new string) Diff {
	from, to := "a/"+name, "b/"+name
	if strings.HasPrefix(name, "/") {
		from, to = name, name
	}
	var a []string
	if old == nil {
		from = "/dev/null"
	} else {
		a = splitLines(*old)
	}
	b := splitLines(new)
	ops := editScript(a, b)
	var d Diff
	for _, o := range ops {
		switch o.kind {
		case '+':
			d.Added++
		case '-':
			d.Removed++
		}
	}
	if d.Added == 0 && d.Removed == 0 {
		return d
	}
	var w strings.Builder
	fmt.Fprintf(&w, "--- %s\n+++ %s\n", from, to)
	writeHunks(&w, ops)
	d.Text = w.String()
	return d
}

// splitLines cuts s into lines that keep their "\n"; the last one may
// have none.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// AddedLines are the lines of b that a shortest edit from a to b adds,
// in order: what a reader who saw a must be shown of b. Past the diff's
// bound of work, every line between the ends a and b share is added.
func AddedLines(a, b []string) []string {
	var out []string
	for _, o := range editScript(a, b) {
		if o.kind == '+' {
			out = append(out, o.line)
		}
	}
	return out
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
	a, b int // 0-based line numbers in the old and new text before this op
}

// editScript turns a into b: common ends trimmed, then a shortest edit
// (Myers) of the middle, within diffWork.
func editScript(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	i, j := 0, 0
	keep := func(line string) { ops = append(ops, op{' ', line, i, j}); i++; j++ }
	for _, l := range a[:pre] {
		keep(l)
	}
	for _, m := range middle(a[pre:len(a)-suf], b[pre:len(b)-suf]) {
		switch m.kind {
		case ' ':
			keep(m.line)
		case '-':
			ops = append(ops, op{'-', m.line, i, j})
			i++
		case '+':
			ops = append(ops, op{'+', m.line, i, j})
			j++
		}
	}
	for _, l := range a[len(a)-suf:] {
		keep(l)
	}
	return ops
}

// middle is a shortest edit script from a to b (Myers' O(ND) greedy
// algorithm), or all of a removed and all of b added when that takes
// more than diffWork or more than diffMaxEdits edits.
func middle(a, b []string) []op {
	n, m := len(a), len(b)
	whole := func() []op {
		out := make([]op, 0, n+m)
		for _, l := range a {
			out = append(out, op{kind: '-', line: l})
		}
		for _, l := range b {
			out = append(out, op{kind: '+', line: l})
		}
		return out
	}
	if n == 0 || m == 0 {
		return whole()
	}
	// Lines become numbers first, so that a comparison costs the same
	// however long the lines are.
	ids := make(map[string]int32, n+m)
	intern := func(lines []string) []int32 {
		out := make([]int32, len(lines))
		for i, l := range lines {
			id, ok := ids[l]
			if !ok {
				id = int32(len(ids))
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	ai, bi := intern(a), intern(b)
	maxD := min(n+m, max(64, diffWork/(n+m)), diffMaxEdits)
	off := maxD + 1
	v := make([]int32, 2*off+1)
	var trace [][]int32 // trace[d] holds v[k] for k in [-d, d] before step d
	found := -1
	for d := 0; d <= maxD && found < 0; d++ {
		trace = append(trace, append([]int32(nil), v[off-d:off+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = int(v[off+k+1]) // down: an insertion
			} else {
				x = int(v[off+k-1]) + 1 // right: a deletion
			}
			y := x - k
			for x < n && y < m && ai[x] == bi[y] {
				x++
				y++
			}
			v[off+k] = int32(x)
			if x >= n && y >= m {
				found = d
				break
			}
		}
	}
	if found < 0 {
		return whole()
	}
	// Walk back from (n, m), one step of d at a time.
	var rev []op
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d] // v before step d, for k in [-d, d]
		get := func(k int) int { return int(prev[k+d]) }
		k := x - y
		var pk int
		if k == -d || k != d && get(k-1) < get(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := get(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, op{kind: ' ', line: a[x]})
		}
		if pk == k+1 {
			y--
			rev = append(rev, op{kind: '+', line: b[y]})
		} else {
			x--
			rev = append(rev, op{kind: '-', line: a[x]})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, op{kind: ' ', line: a[x]})
	}
	out := make([]op, len(rev))
	for i, o := range rev {
		out[len(rev)-1-i] = o
	}
	return out
}

// writeHunks writes the changes of ops with diffContext lines around
// them, in hunks with "@@ -l,s +l,s @@" headers. The text is sized
// before it is written: grown step by step, a diff of many megabytes
// would allocate several times its size.
func writeHunks(w *strings.Builder, ops []op) {
	spans := hunks(ops)
	size := 0
	for _, h := range spans {
		size += 64 // the header
		for _, o := range ops[h[0]:h[1]] {
			size += 1 + len(o.line) + len("\n\\ No newline at end of file\n")
		}
	}
	w.Grow(size)
	for _, h := range spans {
		lo, hi := h[0], h[1]
		aCount, bCount := 0, 0
		for _, o := range ops[lo:hi] {
			if o.kind != '+' {
				aCount++
			}
			if o.kind != '-' {
				bCount++
			}
		}
		fmt.Fprintf(w, "@@ -%s +%s @@\n", hunkRange(ops[lo].a, aCount), hunkRange(ops[lo].b, bCount))
		for _, o := range ops[lo:hi] {
			w.WriteByte(o.kind)
			w.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				w.WriteString("\n\\ No newline at end of file\n")
			}
		}
	}
}

// hunks are the [lo, hi) ranges of ops shown: each change with
// diffContext lines around it, changes closer than two contexts apart
// in one hunk.
func hunks(ops []op) [][2]int {
	var out [][2]int
	for start := 0; start < len(ops); {
		first := start
		for first < len(ops) && ops[first].kind == ' ' {
			first++
		}
		if first == len(ops) {
			break
		}
		lo := max(first-diffContext, 0)
		hi := first
		for {
			for hi < len(ops) && ops[hi].kind != ' ' {
				hi++
			}
			next := hi
			for next < len(ops) && ops[next].kind == ' ' {
				next++
			}
			if next == len(ops) || next-hi > 2*diffContext {
				break
			}
			hi = next
		}
		hi = min(hi+diffContext, len(ops))
		out = append(out, [2]int{lo, hi})
		start = hi
	}
	return out
}

// hunkRange is one side of a hunk header: the 1-based first line and the
// count ("l" alone for one line; for none, the line before).
func hunkRange(start, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, count)
}
