package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadConfig loads arbitrary TOML: the result is a configuration or
// an error that says what is wrong, never a panic or a hang.
func FuzzLoadConfig(f *testing.F) {
	example, err := os.ReadFile("../config.example.toml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		"[agent]\ncommand = \"sh\"\n",
		"[turn]\ntimeout = \"7h\"\n",
		"[turn]\ntimeout = 5\n",
		"[discord]\ntoken_file = \"/dev/zero\"\n",
		"[discord]\ntoken_file = \"/proc/self/environ\"\n",
		"[agent]\nenv = [\"A=${B}\", \"C\"]\n",
		"[pool]\nmax_sessions = -1\n",
		"[http]\nlisten = \"127.0.0.1:99999\"\n",
		"[[agent]]\ncommand = 1\n",
		"unknown = true\n",
		"[agent\n",
		"",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, toml string) {
		path := filepath.Join(dir, "broker.toml")
		if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, []string{"PATH=/usr/bin:/bin"})
		switch {
		case err != nil && strings.TrimSpace(err.Error()) == "":
			t.Fatal("an error without words")
		case err == nil && cfg == nil:
			t.Fatal("no configuration and no error")
		case err == nil && (cfg.Turn.Timeout <= 0 || cfg.Pool.MaxSessions < 1 || cfg.Agent.Command == ""):
			t.Fatalf("a configuration out of bounds was accepted: %+v", cfg)
		}
	})
}

// FuzzParse parses arbitrary text as the configuration file and points
// at its keys: a document or an error that names the file, never a
// panic; every key found has a line within the text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"[turn]\ntimeout = \"5m\" more\n",
		"[turn]\nqueue_size = 8\nqueue_size = 9\n",
		"[[schedules]]\nname = \"a\"\n[[schedules]]\nname = \"b\"\nname = \"c\"\n",
		"[agents.\"x\".y]\n'a'.\"b\" = { c = [1, {d = 2}] }\n",
		"a = \"\\u00e9\"\n[\"é\"]\nb = 1\n",
		"[a\n",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, err := parse("broker.toml", []byte(text))
		if err != nil && !strings.HasPrefix(err.Error(), "broker.toml:") {
			t.Fatalf("an error that does not name the file: %v", err)
		}
		lines := strings.Count(text, "\n") + 1
		walkKeys([]byte(text), func(key string, line int) bool {
			if line < 1 || line > lines {
				t.Fatalf("%s on line %d of %d", key, line, lines)
			}
			if keyLine([]byte(text), key) == 0 {
				t.Fatalf("%s is walked but not found", key)
			}
			return true
		})
		writtenTwice([]byte(text))
	})
}
