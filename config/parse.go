package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// parse reads the configuration file's text, the one time it is parsed:
// keys as written (the case of an MCP server's env names is kept), for
// the reader and, as a copy, for viper. A syntax error names the file,
// its line and column, and says what is wrong in our words.
func parse(name string, text []byte) (map[string]any, error) {
	doc := map[string]any{}
	if len(text) == 0 {
		return doc, nil
	}
	err := toml.Unmarshal(text, &doc)
	var de *toml.DecodeError
	switch {
	case err == nil:
		return doc, nil
	case errors.As(err, &de):
		line, col := de.Position()
		return nil, fmt.Errorf("%s:%d:%d: %s", name, line, col, syntaxWords(text, line, strings.TrimPrefix(err.Error(), "toml: ")))
	default:
		// A key or table written twice: go-toml gives no position.
		if key, first, again := writtenTwice(text); again > 0 {
			return nil, fmt.Errorf("%s:%d: %s is written twice, first on line %d: keep one", name, again, key, first)
		}
		return nil, fmt.Errorf("%s: %s", name, twiceWords(strings.TrimPrefix(err.Error(), "toml: ")))
	}
}

// keyBefore finds the key a line assigns to: "timeout" in
// `timeout = "5m" more`.
var keyBefore = regexp.MustCompile(`^\s*([A-Za-z0-9_.\-"' ]+?)\s*=`)

// tableHeader finds a table's header line: "turn" in `[turn]`.
var tableHeader = regexp.MustCompile(`^\s*\[\[?\s*([^\]]+?)\s*\]\]?`)

// keyAt names the key whose line (1-based) of text a syntax error is on,
// with the table it is in ("turn.timeout"), or "" when the line assigns
// none.
func keyAt(text []byte, line int) string {
	lines := strings.Split(string(text), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	m := keyBefore.FindStringSubmatch(lines[line-1])
	if m == nil {
		return ""
	}
	key := strings.TrimSpace(m[1])
	for i := line - 2; i >= 0; i-- {
		if h := tableHeader.FindStringSubmatch(lines[i]); h != nil {
			return h[1] + "." + key
		}
	}
	return key
}

// syntaxWords says what go-toml's message means, for the value or key
// on line.
func syntaxWords(text []byte, line int, msg string) string {
	after := ""
	if k := keyAt(text, line); k != "" {
		after = " after the value of " + k
	}
	switch {
	case strings.HasPrefix(msg, "expected newline but got "):
		found := strings.TrimPrefix(msg, "expected newline but got ")
		if _, quoted, ok := strings.Cut(found, " "); ok {
			found = quoted
		}
		return fmt.Sprintf("expected the end of the line%s, found %s (a string is written in quotes, a comment starts with #)", after, found)
	case msg == "expected character ]" || msg == "expected character ] but the document ended here":
		return "a table's name needs its closing ]: [name]"
	case msg == "basic strings cannot have new lines":
		return "a string in \"quotes\" must end on its line (write \"\"\"three quotes\"\"\" around one of several lines)"
	case msg == "unterminated literal string" || msg == "literal strings cannot have new lines":
		return "a string in 'single quotes' must end on its line"
	case msg == "expected value, not eof" || strings.HasPrefix(msg, "expected value"):
		return "the file ends where a value should be"
	case msg == "incomplete number" || strings.HasPrefix(msg, "unexpected character") || strings.HasPrefix(msg, "invalid character"):
		if k := keyAt(text, line); k != "" {
			return fmt.Sprintf("the value of %s is not a string, a number, true or false: write a string in quotes (\"5m\")", k)
		}
		return "this is not a key = value line, a [table] or a comment"
	case msg == "expected key but found none" || strings.HasPrefix(msg, "invalid character at start of key"):
		return "expected a key here: key = value"
	case msg == "array elements must be separated by commas":
		return "a list's values are separated by commas: [\"a\", \"b\"]"
	case msg == "array is incomplete":
		return "a list needs its closing ]"
	case msg == "inline table is incomplete":
		return "a table written { … } needs its closing }"
	}
	return "this is not valid TOML: " + msg
}

// twiceWords says go-toml's message about a key or table written twice
// (which has no position) in our words.
func twiceWords(msg string) string {
	var name string
	switch {
	case sscanName(msg, "key %s is already defined", &name):
		return fmt.Sprintf("%s is written twice: keep one", name)
	case sscanName(msg, "table %s already exists", &name):
		return fmt.Sprintf("[%s] is written twice: keep one and put all its keys there", name)
	}
	return "this is not valid TOML: " + msg
}

// sscanName reports whether msg is format (with one %s, a word) and puts
// that word in name.
func sscanName(msg, format string, name *string) bool {
	before, after, _ := strings.Cut(format, "%s")
	rest, ok := strings.CutPrefix(msg, before)
	if !ok {
		return false
	}
	word, ok := strings.CutSuffix(rest, after)
	if !ok || word == "" || strings.ContainsRune(word, ' ') {
		return false
	}
	*name = word
	return true
}

// walkKeys calls f with each key and table the text writes, in order,
// with the line its name starts on, until f returns false or the text
// ends or stops being TOML. A key is dotted from the top, a table's in
// brackets ("[turn]"), and the tables of an array are numbered from 0
// ("agent.mcp_servers[1].command"); an array's own header is not given.
// It builds no values: errors are its only use.
func walkKeys(text []byte, f func(key string, line int) bool) {
	var p unstable.Parser
	p.Reset(text)
	arrays := map[string]int{} // tables of each array so far
	var table string
	for p.NextExpression() {
		e := p.Expression()
		var parts []string
		line := 0
		for it := e.Key(); it.Next(); {
			if line == 0 {
				line = p.Shape(it.Node().Raw).Start.Line
			}
			parts = append(parts, string(it.Node().Data))
		}
		name := strings.Join(parts, ".")
		switch e.Kind {
		case unstable.ArrayTable:
			table = fmt.Sprintf("%s[%d]", name, arrays[name])
			arrays[name]++
			continue
		case unstable.Table:
			table = name
			if !f("["+name+"]", line) {
				return
			}
		case unstable.KeyValue:
			if table != "" {
				name = table + "." + name
			}
			if !f(name, line) {
				return
			}
		}
	}
}

// keyLine is the line (1-based) where the file's text assigns key
// (as walkKeys names it, its case not minding), or 0 if it does not.
func keyLine(text []byte, key string) (line int) {
	walkKeys(text, func(k string, l int) bool {
		if strings.EqualFold(k, key) {
			line = l
		}
		return line == 0
	})
	return line
}

// writtenTwice finds the first key or [table] the text writes a second
// time: its name, and the lines of both (again is 0 if none).
func writtenTwice(text []byte) (key string, first, again int) {
	seen := map[string]int{}
	walkKeys(text, func(k string, line int) bool {
		if f, ok := seen[k]; ok {
			key, first, again = k, f, line
			return false
		}
		seen[k] = line
		return true
	})
	return key, first, again
}

// copyDoc is a deep copy of a parsed document, for viper, which changes
// the maps it is given (their keys to lower case).
func copyDoc(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = copyValue(v)
	}
	return out
}

func copyValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		return copyDoc(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = copyValue(e)
		}
		return out
	}
	return v
}
