package workspace

import (
	"strings"
	"testing"
)

func TestEscapeThread_KeepsSnowflakesAndEscapesTheRest(t *testing.T) {
	for in, want := range map[string]string{
		"1234567890123456789": "1234567890123456789",
		"a_b-c":               "a_b-c",
		"-b":                  "%2Db",
		"../x":                "%2E%2E%2Fx",
		"x.lock":              "x%2Elock",
		"%41":                 "%2541",
		"é":                   "%C3%A9",
	} {
		got, err := escapeThread(in)
		if err != nil || got != want {
			t.Errorf("escapeThread(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func FuzzEscapeThread_IsOneToOneAndSafe(f *testing.F) {
	for _, s := range []string{"123", "../x", "-b", "a/b", "x.lock", "@{", "%2F"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, thread string) {
		name, err := escapeThread(thread)
		if err != nil {
			return
		}
		if strings.ContainsAny(name, "/\\.~^:?*[@ \x00") || strings.HasPrefix(name, "-") || len(name) > 255 {
			t.Fatalf("escapeThread(%q) = %q: not a safe name", thread, name)
		}
		back, ok := unescapeThread(name)
		if !ok || back != thread {
			t.Fatalf("unescapeThread(%q) = %q, %v; want %q", name, back, ok, thread)
		}
	})
}

func TestUnescapeThread_RefusesNamesItDidNotMake(t *testing.T) {
	for _, name := range []string{"%2d", "%41", "a%", ".git", "-b", ""} {
		if thread, ok := unescapeThread(name); ok {
			t.Errorf("unescapeThread(%q) = %q, true; want false", name, thread)
		}
	}
}
