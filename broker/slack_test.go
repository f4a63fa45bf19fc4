package broker

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/redact"

	"github.com/rs/zerolog"
)

// A Slack channel named in [channels] is allowed, and its new threads
// get its profile; a Discord channel's table is not Slack's. The Slack
// client names its threads by channel and ts, the broker adding
// "slack:".
func TestSlack_AChannelWithAProfileIsAllowed(t *testing.T) {
	c, err := loadText(t, "[chat]\nplatform = [\"discord\", \"slack\"]\n[discord]\ntoken = \"t\"\n[slack]\nbot_token = \"x\"\napp_token = \"y\"\n"+
		"[agent]\ncommand = \""+fakeAgent+"\"\n[channels.\"C0AB12\"]\nagent = \"default\"\n[channels.\"42\"]\nagent = \"default\"\n")
	if err != nil {
		t.Fatal(err)
	}
	acc := slackAccess(c)
	if !slices.Equal(acc.AllowedChannels, []string{"C0AB12"}) || !reflect.DeepEqual(acc.ChannelAgents, map[string]string{"C0AB12": "default"}) {
		t.Fatalf("Slack's channels %v, profiles %v; want C0AB12 alone", acc.AllowedChannels, acc.ChannelAgents)
	}
	if !slackConfig(c).BareThreads {
		t.Fatal("the Slack client would name its threads with a prefix of its own, besides the broker's")
	}
}

// The chat platforms' secrets are masked wherever the broker masks the
// agents': Discord's token, Slack's two tokens and its signing secret.
func TestProfiles_ChatSecretsAreMasked(t *testing.T) {
	c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[discord]\ntoken = \"discord-T0KEN\"\n"+
		"[slack]\nbot_token = \"xoxb-B0T\"\napp_token = \"xapp-APP\"\nsigning_secret = \"S1GNING\"\n")
	if err != nil {
		t.Fatal(err)
	}
	agents, err := buildProfiles(c, nil, nil, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	masked := redact.New(agents.secrets...).String("stderr: discord-T0KEN xoxb-B0T xapp-APP S1GNING")
	for _, s := range []string{"T0KEN", "B0T", "APP", "S1GNING"} {
		if strings.Contains(masked, s) {
			t.Fatalf("the redactor leaves %q", masked)
		}
	}
}
