package host

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// A command that never stops printing costs the buffer a bounded number
// of byte copies per byte printed, whatever the limit: keeping the end
// of 64 MiB written 32 KiB at a time into 1 MiB copies each byte about
// once, not the whole megabyte on every read.
func TestOutputBuffer_CopiesPerByteWrittenStayBounded(t *testing.T) {
	chunk := []byte(strings.Repeat("y\n", terminalReadBufferBytes/2))
	for _, limit := range []int{4 << 10, DefaultMaxTerminalBytes, 8 << 20} {
		b := &outputBuffer{limit: limit}
		for range (64 << 20) / len(chunk) {
			b.write(chunk)
		}
		if ratio := float64(b.copied) / float64(b.written); ratio > 1.5 {
			t.Errorf("limit %d: %d bytes copied for %d written (%.2f a byte), want at most 1.5", limit, b.copied, b.written, ratio)
		}
		out, truncated, written := b.get(-1)
		if len(out) != limit || !truncated || written != 64<<20 || !strings.HasSuffix(out, "y\ny\n") {
			t.Errorf("limit %d: kept %d bytes (truncated %v) of %d", limit, len(out), truncated, written)
		}
	}
}

// The ring keeps exactly what the simplest buffer keeps: the last limit
// bytes, from a character's start, for writes of any size, and the last
// tail bytes of them; shrink keeps the end.
func TestOutputBuffer_KeepsTheEndOnACharacterBoundary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "é", "€", "😀", "\n"}
	for round := range 300 {
		limit := 1 + rng.IntN(64)
		b := &outputBuffer{limit: limit}
		var all strings.Builder
		for range rng.IntN(40) {
			var p strings.Builder
			for range rng.IntN(3 * limit) {
				p.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			all.WriteString(p.String())
			b.write([]byte(p.String()))
		}
		tail := rng.IntN(limit + 8)
		for _, n := range []int{-1, tail} {
			got, truncated, written := b.get(n)
			want, wantTrunc := simpleTail(all.String(), limit, n)
			if got != want || truncated != wantTrunc || written != int64(all.Len()) {
				t.Fatalf("round %d, limit %d, get(%d) = %q %v, want %q %v", round, limit, n, got, truncated, want, wantTrunc)
			}
			if !utf8.ValidString(got) {
				t.Fatalf("round %d: %q is not whole characters", round, got)
			}
		}
		b.shrink(tail)
		got, _, _ := b.get(-1)
		if want, _ := simpleTail(all.String(), limit, tail); got != want {
			t.Fatalf("round %d: shrunk to %d keeps %q, want %q", round, tail, got, want)
		}
	}
}

// simpleTail is what a buffer of limit bytes shows of all: its last
// limit bytes, then their last tail (tail < 0: all of them), from a
// character's start; and whether anything was left out.
func simpleTail(all string, limit, tail int) (string, bool) {
	cut := func(s string, n int) (string, bool) {
		if len(s) <= n {
			return s, false
		}
		s = s[len(s)-n:]
		for i := 0; i < utf8.UTFMax-1 && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
			s = s[1:]
		}
		return s, true
	}
	kept, dropped := cut(all, limit)
	if tail < 0 || tail >= min(len(all), limit) {
		return kept, dropped
	}
	// The tail is taken from the kept bytes before their cut.
	raw := all
	if len(raw) > limit {
		raw = raw[len(raw)-limit:]
	}
	out, more := cut(raw, tail)
	return out, dropped || more
}
