package config

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"acpbroker/chat/discord"
	"acpbroker/chat/slack"
)

// A file that is not TOML is refused with its name, the line and the
// column of the fault, and what is wrong in the broker's words, not the
// parser's.
func TestLoad_SyntaxErrorNamesFileLineAndColumn(t *testing.T) {
	cases := []struct{ name, text, want string }{
		{"text after a value", "[agent]\ncommand = \"agent\"\n[turn]\ntimeout = \"5m\" more\n",
			":4:16: expected the end of the line after the value of turn.timeout, found 'm'"},
		{"an unclosed table name", "[agent]\ncommand = \"agent\"\n[turn\n", ":3:6: a table's name needs its closing ]"},
		{"a value without quotes", "[turn]\ntimeout = 5m\n", ":2:12: expected the end of the line after the value of turn.timeout"},
		{"a word without quotes", "[agent]\ncommand = agent\n", ":2:11: the value of agent.command is not a string, a number, true or false: write a string in quotes"},
		{"an unfinished string", "[turn]\ntimeout = \"5m\n", ":2:14: a string in \"quotes\" must end on its line"},
		{"a key twice", "[turn]\nqueue_size = 8\nqueue_size = 9\n", ":3: turn.queue_size is written twice, first on line 2: keep one"},
		{"a key twice in an array's table", "[[schedules]]\nname = \"a\"\n[[schedules]]\nname = \"b\"\nname = \"c\"\n",
			":5: schedules[1].name is written twice, first on line 4: keep one"},
		{"a table twice", "[turn]\nqueue_size = 8\n[pool]\n[turn]\n", ":4: [turn] is written twice, first on line 1: keep one"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadText(t, tc.text)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "broker.toml"+tc.want) {
				t.Errorf("%s\nlacks %q", msg, "broker.toml"+tc.want)
			}
			for _, library := range []string{"(^| )toml: ", "U\\+00", "already defined"} {
				if regexp.MustCompile(library).MatchString(msg) {
					t.Errorf("%s\nspeaks the parser's words (%q)", msg, library)
				}
			}
		})
	}
}

// A value of the wrong type is refused with its key, the line it is
// written on and what was expected, in the broker's words.
func TestLoad_WrongTypeNamesTheKeyAndItsLine(t *testing.T) {
	text := "[agent]\ncommand = \"" + fakeAgent + "\"\n\n[turn]\ntimeout = \"10m\"\nqueue_size = \"eight\"\n[discord]\nshow_thoughts = \"yes\"\napi_url = [\"https://discord.com/api/v9/\"]\n"
	_, err := loadText(t, text)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		`broker.toml:6: turn.queue_size must be a whole number, not "eight"`,
		`broker.toml:8: discord.show_thoughts must be true or false, not "yes"`,
		`broker.toml:9: discord.api_url must be a string, not a list`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s\nlacks %q", msg, want)
		}
	}
	for _, library := range []string{"unable to cast", "strconv", "ParseInt", "of type"} {
		if strings.Contains(msg, library) {
			t.Errorf("%s\nspeaks the library's words (%q)", msg, library)
		}
	}
	// A number that is not whole is not taken for one.
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[turn]\nqueue_size = 8.5\n[pool]\nmax_sessions = true\n")
	for _, want := range []string{"broker.toml:4: turn.queue_size must be a whole number, not 8.5", "broker.toml:6: pool.max_sessions must be a whole number, not true"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
	// So is a key of a table in an array, by its index.
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[[agent.mcp_servers]]\nname = \"a\"\ncommand = \"a\"\n"+
		"[[agent.mcp_servers]]\nname = \"b\"\n\ntype = \"ftp\"\n")
	if want := `broker.toml:9: agent.mcp_servers[1].type = "ftp" must be one of stdio, http, sse`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	// And a key that is not one.
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[turn]\ntimout = \"5m\"\n")
	if want := "unknown key(s): turn.timout ("; err == nil || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "broker.toml:4)") {
		t.Errorf("got %v, want %q and the line", err, want)
	}
	// A key out of its range is pointed at too.
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[turn]\ntimeout = \"7h\"\n")
	if err == nil || !strings.Contains(err.Error(), "broker.toml:4: turn.timeout = 7h0m0s is out of range") {
		t.Errorf("turn.timeout = 7h: %v", err)
	}
}

// A value from the environment that is refused is named by its variable,
// with the value unless the key is a secret.
func TestLoad_ErrorFromTheEnvironmentNamesTheVariable(t *testing.T) {
	_, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[turn]\ntimeout = \"10m\"\n", "BROKER_TURN_TIMEOUT=5 minutes")
	want := `BROKER_TURN_TIMEOUT=5 minutes: turn.timeout = "5 minutes" is not a duration`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n", "BROKER_TURN_QUEUE_SIZE=eight")
	want = `BROKER_TURN_QUEUE_SIZE=eight: turn.queue_size must be a whole number, not "eight"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	secret := filepath.Join(t.TempDir(), "no-such-token")
	_, err = loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n", "BROKER_DISCORD_TOKEN_FILE="+secret)
	want = "BROKER_DISCORD_TOKEN_FILE: discord.token_file cannot be read"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	if err != nil && strings.Contains(err.Error(), "BROKER_DISCORD_TOKEN_FILE=") {
		t.Errorf("a secret key's variable is shown with its value: %v", err)
	}
}

// An answer's edit interval has one default per platform, the client's
// own: the configuration's default is it, as a client given none uses.
func TestLoad_EditIntervalDefaultsAreThePlatforms(t *testing.T) {
	c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Discord.EditInterval != discord.DefaultEditInterval {
		t.Errorf("discord.edit_interval defaults to %s, the client to %s", c.Discord.EditInterval, discord.DefaultEditInterval)
	}
	if c.Slack.EditInterval != slack.DefaultEditInterval {
		t.Errorf("slack.edit_interval defaults to %s, the client to %s", c.Slack.EditInterval, slack.DefaultEditInterval)
	}
}

// Reading the configuration asks nothing of the machine: a program not
// on PATH and a user the machine lacks are read as written, for the
// broker to find where it is wired.
func TestLoad_AsksNothingOfTheMachine(t *testing.T) {
	c, err := Load("", []string{"PATH=/nonexistent",
		"BROKER_AGENT_COMMAND=no-such-agent", "BROKER_AGENT_RUN_AS_USER=no-such-user-42",
		"BROKER_AGENT_SANDBOX=launcher", "BROKER_AGENT_LAUNCHER=no-such-launcher,run"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Profiles[DefaultProfileName].Command != "no-such-agent" || c.Agent.RunAsUser != "no-such-user-42" || c.Agent.RunAs != nil || c.Agent.Launcher[0] != "no-such-launcher" {
		t.Errorf("command %q, run_as_user %q (%+v), launcher %q: not as written", c.Profiles[DefaultProfileName].Command, c.Agent.RunAsUser, c.Agent.RunAs, c.Agent.Launcher)
	}
}
