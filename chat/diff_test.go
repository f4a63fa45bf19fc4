package chat

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// apply patches old with a unified diff, checking every context and
// removed line against it: a diff that applies and gives new is correct.
func apply(t *testing.T, old, diff string) string {
	t.Helper()
	a := splitLines(old)
	var out []string
	at := 0 // next line of a not yet copied
	lines := splitLines(diff)
	for i := 2; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "@@") {
			var as, ac, bs, bc int
			if n, _ := fmt.Sscanf(l, "@@ -%d,%d +%d,%d @@", &as, &ac, &bs, &bc); n < 1 {
				t.Fatalf("bad hunk header %q", l)
			}
			from := as - 1
			if strings.HasPrefix(l, fmt.Sprintf("@@ -%d,0 ", as)) {
				from = as
			}
			out = append(out, a[at:from]...)
			at = from
			continue
		}
		body := l[1:]
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\\ No newline") {
			body = strings.TrimSuffix(body, "\n")
			i++
		}
		switch l[0] {
		case ' ', '-':
			if at >= len(a) || a[at] != body {
				t.Fatalf("line %d: %q does not match old %q\n%s", i, body, a[min(at, len(a)-1)], diff)
			}
			if l[0] == ' ' {
				out = append(out, body)
			}
			at++
		case '+':
			out = append(out, body)
		default:
			t.Fatalf("bad diff line %q", l)
		}
	}
	out = append(out, a[at:]...)
	return strings.Join(out, "")
}

func TestUnifiedDiff_SmallEditNewFileAndNoNewline(t *testing.T) {
	old := "a\nb\nc\nd\ne\nf\ng\nh\n"
	d := UnifiedDiff("x.txt", &old, "a\nb\nc\nD\ne\nf\ng\nh\n")
	want := "--- a/x.txt\n+++ b/x.txt\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n"
	if d.Text != want || d.Added != 1 || d.Removed != 1 {
		t.Fatalf("diff =\n%s(+%d -%d)", d.Text, d.Added, d.Removed)
	}
	n := UnifiedDiff("new.md", nil, "# Notes\nfirst\n")
	if n.Text != "--- /dev/null\n+++ b/new.md\n@@ -0,0 +1,2 @@\n+# Notes\n+first\n" || n.Added != 2 {
		t.Fatalf("new file diff =\n%s", n.Text)
	}
	nl := "x\ny"
	e := UnifiedDiff("/abs/f", &nl, "x\ny\n")
	if e.Text != "--- /abs/f\n+++ /abs/f\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n+y\n" {
		t.Fatalf("newline diff =\n%s", e.Text)
	}
	if same := UnifiedDiff("f", &old, old); same.Text != "" {
		t.Fatalf("equal texts give %q", same.Text)
	}
}

// Random edits: each diff applies to the old text and gives the new, and
// is no longer than removing and adding everything.
func TestUnifiedDiff_AppliesToGiveTheNewText(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "d\n", "e", "}\n"}
	gen := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(words[r.IntN(len(words))])
		}
		return b.String()
	}
	for i := range 500 {
		old, nu := gen(r.IntN(30)), gen(r.IntN(30))
		if i%3 == 0 {
			nu = old[:len(old)/2] + gen(3) + old[len(old)/2:]
		}
		d := UnifiedDiff("f", &old, nu)
		if d.Text == "" {
			if old != nu && strings.Join(splitLines(old), "") != nu {
				t.Fatalf("no diff for %q -> %q", old, nu)
			}
			continue
		}
		if got := apply(t, old, d.Text); got != nu {
			t.Fatalf("diff of %q -> %q applies to %q:\n%s", old, nu, got, d.Text)
		}
		if d.Added > len(splitLines(nu)) || d.Removed > len(splitLines(old)) {
			t.Fatalf("diff larger than replacing everything: %+v", d)
		}
	}
}

// Texts too different to compare within the bound still give a correct
// diff, at once.
func TestUnifiedDiff_HugeDifferencesStayBounded(t *testing.T) {
	var a, b strings.Builder
	for i := range 50_000 {
		fmt.Fprintf(&a, "old %d\n", i)
		fmt.Fprintf(&b, "new %d\n", i)
	}
	old := a.String()
	d := UnifiedDiff("big", &old, b.String())
	if d.Added != 50_000 || d.Removed != 50_000 {
		t.Fatalf("+%d -%d", d.Added, d.Removed)
	}
	if got := apply(t, old, d.Text); got != b.String() {
		t.Fatal("huge diff does not apply")
	}
}

// The texts whose search was the largest before edits were bounded (two
// thousand and more lines a side, every one changed) take a bounded
// amount of memory, and long lines cost no more than short ones.
func TestUnifiedDiff_MemoryIsBoundedWhateverTheSize(t *testing.T) {
	for _, lines := range []int{1_000, 2_236, 5_000} {
		for _, width := range []int{8, 4_000} {
			pad := strings.Repeat("x", width)
			var a, b strings.Builder
			for i := range lines {
				fmt.Fprintf(&a, "%s old %d\n", pad, i)
				fmt.Fprintf(&b, "%s new %d\n", pad, i)
			}
			old, nu := a.String(), b.String()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			d := UnifiedDiff("f", &old, nu)
			runtime.ReadMemStats(&after)
			if d.Added != lines || d.Removed != lines {
				t.Fatalf("%d lines: +%d -%d", lines, d.Added, d.Removed)
			}
			// What the diff must hold anyway: its text and one op per line.
			need := uint64(len(d.Text))*3/2 + uint64(2*lines)*64
			got := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d lines of %d bytes: %.1f MiB allocated for a %.1f MiB diff",
				lines, width, float64(got)/(1<<20), float64(len(d.Text))/(1<<20))
			if got > need+16<<20 {
				t.Errorf("%d lines of %d bytes: allocated %d MiB (the diff itself is %d MiB)",
					lines, width, got>>20, len(d.Text)>>20)
			}
			if got := apply(t, old, d.Text); got != nu {
				t.Fatalf("%d lines: diff does not apply", lines)
			}
		}
	}
}

func TestAddedLines_AreWhatAReaderOfTheOldTextHasNotSeen(t *testing.T) {
	for _, c := range []struct {
		a, b, want []string
	}{
		{nil, []string{"x", "y"}, []string{"x", "y"}},
		{[]string{"answer"}, []string{"answer", "more"}, []string{"more"}},
		{[]string{"⏳ Read running", "answer"}, []string{"✅ Read done", "answer", "more"}, []string{"✅ Read done", "more"}},
		{[]string{"a", "b", "c"}, []string{"a", "c"}, nil},
		{[]string{"a", "b"}, []string{"a", "b"}, nil},
	} {
		if got := AddedLines(c.a, c.b); !slices.Equal(got, c.want) {
			t.Errorf("AddedLines(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
}
