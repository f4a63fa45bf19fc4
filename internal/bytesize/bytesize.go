// Package bytesize reads and writes sizes in bytes as people and
// operators write them: powers of 1024 with systemd's units.
//
// It is ours rather than go-humanize's: ParseBytes reads "4G" and "4GB"
// as 4×10⁹ bytes and takes words ("4 gigabytes"), so a memory limit
// copied from a unit file would come out 7% smaller than systemd reads
// it; README documents these units.
package bytesize

import (
	"errors"
	"strconv"
	"strings"
)

// units are the units a size may have: powers of 1024, as systemd's
// MemoryMax= reads K, M, G and T.
var units = map[string]int64{"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "GiB": 1 << 30, "T": 1 << 40, "TiB": 1 << 40}

// ErrSyntax is Parse's error for what is not a size.
var ErrSyntax = errors.New(`not a size like "4GiB", "512MiB" or a number of bytes`)

// Parse reads a number of bytes: a whole number, or one with a unit
// ("512MiB", "4GiB", "4G", "1.5 GiB").
func Parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(c rune) bool { return (c < '0' || c > '9') && c != '.' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult, ok := units[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || v < 0 {
		return 0, ErrSyntax
	}
	return int64(v * float64(mult)), nil
}

// Format says a size for people: "4 GiB", "1.5 GiB", "512 MiB", "100 B".
func Format(n int64) string {
	names := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(names)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + names[i]
}
