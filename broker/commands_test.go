package broker

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"acpbroker/config"

	"github.com/rs/zerolog"
)

// The programs the configuration names are found where the broker is
// wired, as it starts them: a bare name on the broker's PATH, a path with
// a slash from the broker's working directory (not the agent's); anything
// else is refused with the key where the program is written.
func TestBuildProfiles_CommandsAreFoundOrNamed(t *testing.T) {
	bin := t.TempDir()
	agent := filepath.Join(bin, "agent")
	os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "facts-mcp"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(bin, "notes.txt"), []byte("x"), 0o644)
	t.Chdir(bin)
	build := func(text string, environ ...string) (*config.Config, error) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "broker.toml")
		os.WriteFile(path, []byte(text), 0o600)
		environ = append(environ, "PATH=/nonexistent:"+bin)
		cfg, err := config.Load(path, environ)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if err := complete(cfg, environ, true); err != nil {
			return cfg, err
		}
		_, err = buildProfiles(cfg, environ, nil, nil, zerolog.Nop())
		return cfg, err
	}
	for _, tc := range []struct{ command, want, err string }{
		{"agent", agent, ""},
		{"./agent", agent, ""},
		{agent, agent, ""},
		{"./notes.txt", "", `agent.command = "./notes.txt": ` + filepath.Join(bin, "notes.txt") + " is not an executable file"},
		{"no-such-agent", "", `agent.command = "no-such-agent" is not found on PATH`},
	} {
		for _, text := range []string{"[agent]\ncommand = \"" + tc.command + "\"\n", ""} {
			var env []string
			if text == "" {
				env = []string{"BROKER_AGENT_COMMAND=" + tc.command}
			}
			cfg, err := build(text, env...)
			switch {
			case tc.err == "" && (err != nil || cfg.Profiles["default"].Command != tc.want):
				t.Errorf("%q (%v): got %q, %v; want %s", tc.command, env, cfg.Profiles["default"].Command, err, tc.want)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%q (%v): err = %v, want %q", tc.command, env, err, tc.err)
			}
		}
	}

	// A profile's own command, and an MCP server's, are named where written;
	// one written in [agent] and taken by every profile is said once.
	cfg, err := build("[agent]\ncommand = \"agent\"\n[[agent.mcp_servers]]\nname = \"a\"\ncommand = \"facts-mcp\"\n" +
		"[[agent.mcp_servers]]\nname = \"b\"\ncommand = \"foo\"\n" +
		"[agents]\ndefault = \"a\"\n[agents.a]\ncommand = \"no-such-agent\"\n[agents.b]\ncwd = \"/srv\"\n")
	for _, want := range []string{
		`agents.a.command = "no-such-agent" is not found on PATH`,
		`agent.mcp_servers[1].command = "foo" is not found on PATH`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	if err != nil && strings.Count(err.Error(), "mcp_servers[1]") != 1 {
		t.Errorf("[agent]'s MCP server is said more than once: %v", err)
	}
	if got := cfg.Profiles["b"].MCPServers[0].Command; got != filepath.Join(bin, "facts-mcp") {
		t.Errorf("profile b's MCP server command = %q, want it found on PATH", got)
	}

	// The launcher is found with agent.sandbox = "launcher" alone.
	cfg, err = build("[agent]\ncommand = \"agent\"\nsandbox = \"launcher\"\nlauncher = [\"no-such-launcher\", \"run\"]\n")
	if want := `agent.launcher = "no-such-launcher" is not found on PATH`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	cfg, err = build("[agent]\ncommand = \"agent\"\nsandbox = \"launcher\"\nlauncher = [\"facts-mcp\", \"run\"]\n")
	if err != nil || cfg.Agent.Launcher[0] != filepath.Join(bin, "facts-mcp") {
		t.Errorf("launcher %v, %v; want it found on PATH", cfg.Agent.Launcher, err)
	}
}

// agent.run_as_user is found where the broker is wired: a user the
// machine lacks is refused naming the key, and one it has becomes the
// user agents run as (a broker not root cannot run them as another).
func TestBuildProfiles_TheAgentsUserIsFoundOrNamed(t *testing.T) {
	build := func(user string) (*config.Config, error) {
		t.Helper()
		cfg, err := loadText(t, fmt.Sprintf("[agent]\ncommand = %q\nrun_as_user = %q\n", fakeAgent, user))
		if err != nil {
			t.Fatalf("run_as_user = %q: %v", user, err)
		}
		env := []string{"PATH=" + filepath.Dir(fakeAgent)}
		if err := complete(cfg, env, true); err != nil {
			return cfg, err
		}
		_, err = buildProfiles(cfg, env, nil, nil, zerolog.Nop())
		return cfg, err
	}
	_, err := build("no-such-user-42")
	if want := `agent.run_as_user = "no-such-user-42": no such user`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	cfg, err := build("nobody")
	switch {
	case os.Getuid() != 0:
		if want := `agent.run_as_user = "nobody" needs the broker to run as root`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	case err != nil:
		t.Fatal(err)
	default:
		nobody, lerr := user.Lookup("nobody")
		if lerr != nil {
			t.Skip(lerr)
		}
		if cfg.Agent.RunAs == nil || strconv.FormatUint(uint64(cfg.Agent.RunAs.Uid), 10) != nobody.Uid {
			t.Errorf("agents run as %+v, want nobody's uid %s", cfg.Agent.RunAs, nobody.Uid)
		}
	}
}
