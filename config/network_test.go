package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// agent.sandbox_network = false, from before agent.network, is "none"
// for every profile that writes no network of its own, from the file or
// the environment; without it, a profile's network is as written or the
// default, the proxy.
func TestLoad_SandboxNetworkFalseIsNoneWhereNoNetworkIsWritten(t *testing.T) {
	text := `[agent]
command = "/bin/true"
sandbox_network = %s
[agents]
default = "a"
[agents.a]
network = "host"
[agents.b]
allow_hosts = ["x.example.com"]
`
	for _, c := range []struct {
		sandboxNetwork string
		env            []string
		a, b           string
	}{
		{"false", nil, "host", "none"},
		{"false", []string{"BROKER_AGENT_NETWORK=proxy"}, "host", "proxy"},
		{"true", nil, "host", "proxy"},
	} {
		path := filepath.Join(t.TempDir(), "broker.toml")
		if err := os.WriteFile(path, []byte(strings.Replace(text, "%s", c.sandboxNetwork, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, c.env)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := cfg.Profiles["a"].Network, cfg.Profiles["b"].Network; a != c.a || b != c.b {
			t.Errorf("sandbox_network = %s, environment %v: networks a %q, b %q; want %q, %q", c.sandboxNetwork, c.env, a, b, c.a, c.b)
		}
	}
}

// An allow list that is not one is refused naming the key, the line and
// the entry.
func TestLoad_ABadAllowEntryIsNamed(t *testing.T) {
	for entry, want := range map[string]string{
		`"*"`:            `agents.b.allow_hosts`,
		`"10.0.0.5"`:     `"10.0.0.5"`,
		`"host:99999"`:   `"host:99999"`,
		`"exa mple.com"`: `"exa mple.com"`,
	} {
		path := filepath.Join(t.TempDir(), "broker.toml")
		text := "[agent]\ncommand = \"/bin/true\"\n[agents]\ndefault = \"b\"\n[agents.b]\nallow_hosts = [" + entry + "]\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path, nil)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "allow_hosts") || !strings.Contains(err.Error(), ":6") {
			t.Errorf("allow_hosts = [%s]: %v; want an error naming %s, the key and its line", entry, err, want)
		}
	}
}

// A profile's network written with no sandbox to put it in force is
// warned of, naming the key; the default, unwritten, is not.
func TestLoad_ANetworkWithoutTheSandboxIsWarned(t *testing.T) {
	for _, c := range []struct {
		text string
		warn bool
	}{
		{"[agent]\ncommand = \"/bin/true\"\nsandbox = \"none\"\nnetwork = \"proxy\"\n", true},
		{"[agent]\ncommand = \"/bin/true\"\nsandbox = \"none\"\n", false},
		{"[agent]\ncommand = \"/bin/true\"\nsandbox = \"none\"\nnetwork = \"host\"\n", false},
		{"[agent]\ncommand = \"/bin/true\"\nnetwork = \"none\"\n", false},
	} {
		path := filepath.Join(t.TempDir(), "broker.toml")
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, w := range cfg.Warnings {
			warned = warned || strings.Contains(w, "agent.network") && strings.Contains(w, "applies only with agent.sandbox")
		}
		if warned != c.warn {
			t.Errorf("%q: warned %v, want %v (%q)", c.text, warned, c.warn, cfg.Warnings)
		}
	}
}
