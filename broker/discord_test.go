package broker

import (
	"slices"
	"testing"

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
