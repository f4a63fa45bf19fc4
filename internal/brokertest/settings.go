package brokertest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Settings are broker configuration keys as in the TOML file
// ("turn.timeout") with their values: strings, string lists, numbers or
// bools.
type Settings map[string]any

// With returns a copy of s with over applied; a nil value in over
// removes the key.
func (s Settings) With(over Settings) Settings {
	out := Settings{}
	for k, v := range s {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// TOML renders the settings as a TOML file, one table per prefix, in a
// stable order.
func (s Settings) TOML() string {
	tables := map[string][]string{}
	for k, v := range s {
		table, key, _ := strings.Cut(k, ".")
		tables[table] = append(tables[table], key+" = "+tomlValue(v))
	}
	names := make([]string, 0, len(tables))
	for name := range tables {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		lines := tables[name]
		sort.Strings(lines)
		fmt.Fprintf(&b, "[%s]\n%s\n\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

func tomlValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []string:
		quoted := make([]string, len(v))
		for i, s := range v {
			quoted[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(quoted, ", ") + "]"
	default:
		return fmt.Sprint(v)
	}
}
