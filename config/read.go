package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"acpbroker/cgroup"

	"github.com/spf13/cast"
	"github.com/spf13/viper"
)

// reader reads typed values, records them, and collects one error per bad
// key.
type reader struct {
	v    *viper.Viper
	errs []error
	vals map[string]string
	env  map[string]string // the broker's environment
}

func (r *reader) record(key string, v any) { r.vals[key] = fmt.Sprint(v) }

func (r *reader) fail(key, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s %s", key, fmt.Sprintf(format, args...)))
}

func (r *reader) str(key string) string {
	s, err := cast.ToStringE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be a string: %v", err)
	}
	r.record(key, s)
	return s
}

// absPaths reads a list of absolute paths.
func (r *reader) absPaths(key string) []string {
	paths := r.strs(key)
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			r.fail(key, "has %q, which is not an absolute path", p)
		}
	}
	return paths
}

func (r *reader) strs(key string) []string {
	raw := r.v.Get(key)
	if s, ok := raw.(string); ok { // from the environment: comma or space separated
		out := strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' })
		r.record(key, out)
		return out
	}
	out, err := cast.ToStringSliceE(raw)
	if err != nil {
		r.fail(key, "must be a list of strings: %v", err)
	}
	r.record(key, out)
	return out
}

func (r *reader) boolean(key string) bool {
	b, err := cast.ToBoolE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be true or false: %v", err)
	}
	r.record(key, b)
	return b
}

func (r *reader) integer(key string, lo, hi int) int {
	n, err := cast.ToIntE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be a whole number: %v", err)
		return 0
	}
	if n < lo || n > hi {
		r.fail(key, "= %d is out of range [%d, %d]", n, lo, hi)
	}
	r.record(key, n)
	return n
}

// integerOrZero is integer with 0, for none, allowed below lo.
func (r *reader) integerOrZero(key string, lo, hi int) int {
	n, err := cast.ToIntE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be a whole number: %v", err)
		return 0
	}
	if n != 0 && (n < lo || n > hi) {
		r.fail(key, "= %d is out of range [%d, %d] (0: no limit)", n, lo, hi)
	}
	r.record(key, n)
	return n
}

// sizeUnits are the units a size may have: powers of 1024, as systemd's
// MemoryMax= reads K, M, G and T.
var sizeUnits = map[string]int64{"": 1, "B": 1, "K": 1 << 10, "KiB": 1 << 10, "M": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "GiB": 1 << 30, "T": 1 << 40, "TiB": 1 << 40}

// size reads a number of bytes: a whole number, or one with a unit
// ("512MiB", "4GiB", "4G"). 0 is none; other sizes must be in [lo, hi].
func (r *reader) size(key string, lo, hi int64) int64 {
	raw := r.v.Get(key)
	s := strings.TrimSpace(fmt.Sprint(raw))
	r.record(key, s)
	i := strings.IndexFunc(s, func(c rune) bool { return (c < '0' || c > '9') && c != '.' })
	if i < 0 {
		i = len(s)
	}
	num, unit := s[:i], strings.TrimSpace(s[i:])
	mult, okUnit := sizeUnits[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !okUnit || err != nil || v < 0 {
		r.fail(key, "= %q is not a size like \"4GiB\", \"512MiB\" or a number of bytes (0: no limit)", s)
		return 0
	}
	n := int64(v * float64(mult))
	if n != 0 && (n < lo || n > hi) {
		r.fail(key, "= %s is out of range [%s, %s] (0: no limit)", s, cgroup.FormatBytes(lo), cgroup.FormatBytes(hi))
	}
	return n
}

func (r *reader) dur(key string, lo, hi time.Duration) time.Duration {
	s := r.str(key)
	d, err := time.ParseDuration(s)
	if err != nil {
		r.fail(key, "= %q is not a duration like \"90s\" or \"5m\"", s)
		return 0
	}
	if d < lo || d > hi {
		r.fail(key, "= %s is out of range [%s, %s]", d, lo, hi)
	}
	r.record(key, d)
	return d
}

func (r *reader) oneOf(key string, allowed ...string) string {
	s := r.str(key)
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	r.fail(key, "= %q must be one of %s", s, strings.Join(allowed, ", "))
	return s
}

// envList reads "NAME=value" entries (the list form keeps names' case).
func (r *reader) envList(key string) map[string]string {
	out := map[string]string{}
	for _, kv := range r.strs(key) {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			r.fail(key, "entry %q must look like NAME=value", kv)
			continue
		}
		out[name] = val
	}
	return out
}
