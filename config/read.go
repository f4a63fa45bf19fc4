package config

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"acpbroker/internal/bytesize"

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
	// path and text are the file read, to point at a key's line;
	// fromEnv says where each key set from the environment was read
	// from: "BROKER_TURN_TIMEOUT=5 minutes" (a secret's variable alone).
	path    string
	text    []byte
	fromEnv map[string]string
}

func (r *reader) record(key string, v any) { r.vals[key] = fmt.Sprint(v) }

// fail records an error of key, after the variable it was read from or
// the file and line it is written on.
func (r *reader) fail(key, format string, args ...any) {
	msg := key + " " + fmt.Sprintf(format, args...)
	if from, ok := r.fromEnv[key]; ok {
		msg = from + ": " + msg
	} else if line := keyLine(r.text, key); line > 0 {
		msg = fmt.Sprintf("%s:%d: %s", r.path, line, msg)
	}
	r.errs = append(r.errs, errors.New(msg))
}

func (r *reader) str(key string) string {
	raw := r.v.Get(key)
	s, err := cast.ToStringE(raw)
	if err != nil {
		r.fail(key, "must be a string, not %s", written(raw))
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
		r.fail(key, "must be a list of strings, not %s", written(raw))
	}
	r.record(key, out)
	return out
}

func (r *reader) boolean(key string) bool {
	raw := r.v.Get(key)
	b, err := cast.ToBoolE(raw)
	if err != nil {
		r.fail(key, "must be true or false, not %s", written(raw))
	}
	r.record(key, b)
	return b
}

func (r *reader) integer(key string, lo, hi int) int {
	raw := r.v.Get(key)
	n, err := wholeNumber(raw)
	if err != nil {
		r.fail(key, "must be a whole number, not %s", written(raw))
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
	raw := r.v.Get(key)
	n, err := wholeNumber(raw)
	if err != nil {
		r.fail(key, "must be a whole number, not %s", written(raw))
		return 0
	}
	if n != 0 && (n < lo || n > hi) {
		r.fail(key, "= %d is out of range [%d, %d] (0: no limit)", n, lo, hi)
	}
	r.record(key, n)
	return n
}

// size reads a number of bytes: a whole number, or one with a unit
// ("512MiB", "4GiB", "4G"). 0 is none; other sizes must be in [lo, hi].
func (r *reader) size(key string, lo, hi int64) int64 {
	s := strings.TrimSpace(fmt.Sprint(r.v.Get(key)))
	r.record(key, s)
	n, err := bytesize.Parse(s)
	if err != nil {
		r.fail(key, "= %q is %v (0: no limit)", s, err)
		return 0
	}
	if n != 0 && (n < lo || n > hi) {
		r.fail(key, "= %s is out of range [%s, %s] (0: no limit)", s, bytesize.Format(lo), bytesize.Format(hi))
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

// wholeNumber is v as an int: a TOML integer, or a string of one (from
// the environment); 8.5 is not one, nor is true.
func wholeNumber(v any) (int, error) {
	switch v := v.(type) {
	case float64:
		if v != math.Trunc(v) {
			return 0, errors.New("not whole")
		}
	case bool:
		return 0, errors.New("not a number")
	}
	return cast.ToIntE(v)
}

// written is a value as a person wrote it, for an error: a string in
// quotes, a list or a table by what it is.
func written(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []any, []string:
		return "a list"
	case map[string]any:
		return "a table"
	case nil:
		return "nothing"
	}
	return fmt.Sprint(v)
}
