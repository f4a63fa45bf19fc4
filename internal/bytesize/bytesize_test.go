package bytesize

import (
	"errors"
	"testing"
)

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{4 << 30: "4 GiB", 64 << 20: "64 MiB", 3 << 29: "1.5 GiB", 100: "100 B", 1 << 10: "1 KiB", 1 << 50: "1 PiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "4096": 4096, "4G": 4 << 30, "4GiB": 4 << 30, "512 MiB": 512 << 20, "1.5K": 1536, "2T": 2 << 40, "7B": 7} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "4GB", "four", "-1", "4 gigabytes", "1.2.3M"} {
		if got, err := Parse(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %d, %v; want ErrSyntax", s, got, err)
		}
	}
}
