package config

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A broker run as root with agents unconfined and no user of their own
// is warned that its agents run as root; naming a user, or the
// sandbox, ends the warning.
func TestLoadConfig_RootWithAgentsUnconfinedIsWarned(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	const warning = `agent.sandbox = "none" with the broker running as root and no agent.run_as_user`
	base := "[agent]\ncommand = " + strconv.Quote(fakeAgent) + "\nsandbox = \"none\"\n"
	for _, tc := range []struct {
		name, extra string
		warned      bool
	}{
		{"root, unconfined", "", true},
		{"root, unconfined, as nobody", "run_as_user = \"nobody\"\n", false},
	} {
		cfg, err := loadText(t, base+tc.extra)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		warned := slices.ContainsFunc(cfg.Warnings, func(w string) bool { return strings.Contains(w, warning) })
		if warned != tc.warned {
			t.Errorf("%s: warned %v (%q), want %v", tc.name, warned, cfg.Warnings, tc.warned)
		}
	}
}
