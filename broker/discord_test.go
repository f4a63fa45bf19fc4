package broker

import (
	"acpbroker/acp/host"
	"slices"
	"testing"

	"acpbroker/chat/discord"
	"acpbroker/chat/slack"
	"acpbroker/chat/thread"
	"acpbroker/config"
)

// A channel named in [channels] is allowed: a Discord configuration
// needs no discord.allowed_channels beside it.
func TestDiscord_AChannelWithAProfileIsAllowed(t *testing.T) {
	c, err := loadText(t, "[chat]\nplatform = \"discord\"\n[discord]\ntoken = \"t\"\n[agent]\ncommand = \""+fakeAgent+"\"\n[channels.\"42\"]\nagent = \"default\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if acc := discordAccess(c); !slices.Contains(acc.AllowedChannels, "42") {
		t.Fatalf("allowed channels = %v, want 42 among them", acc.AllowedChannels)
	}
}

// Every platform the configuration accepts is one a broker can serve.
func TestKnown_ServesEveryPlatformTheConfigurationNames(t *testing.T) {
	known := Known()
	for _, name := range config.Platforms {
		if known[name] == nil {
			t.Errorf("chat.platform accepts %q, which no broker serves", name)
		}
	}
	if len(known) != len(config.Platforms) {
		t.Errorf("the broker knows %d platforms, the configuration %d", len(known), len(config.Platforms))
	}
}

// The configuration's defaults for the platforms are the platforms' own:
// config is a leaf and writes them as values, so this is where they are
// held together.
func TestDefaults_TheConfigurationsArePlatformsOwn(t *testing.T) {
	c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		key       string
		got, want any
	}{
		{"discord.api_url", c.Discord.APIURL, discord.DefaultAPIURL},
		{"discord.edit_interval", c.Discord.EditInterval, discord.DefaultEditInterval},
		{"discord.edit_interval (the answer's view)", c.Discord.EditInterval, thread.DefaultEditInterval},
		{"slack.api_url", c.Slack.APIURL, slack.DefaultAPIURL},
		{"slack.edit_interval", c.Slack.EditInterval, slack.DefaultEditInterval},
		{"agent.max_terminals", c.Agent.MaxTerminals, host.DefaultMaxTerminals},
		{"agent.max_terminal_bytes", c.Agent.MaxTerminalBytes, host.DefaultMaxTerminalBytes},
	} {
		if d.got != d.want {
			t.Errorf("%s defaults to %v in the configuration, %v in its platform", d.key, d.got, d.want)
		}
	}
}
