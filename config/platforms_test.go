package config

import (
	"slices"
	"strings"
	"testing"
)

// chat.platform names one platform, as it always did, or a list of them;
// the environment (and so --platform) gives a list separated by commas.
// The console is served alone: a list with it and another is refused
// naming the key, and so are a name twice, an unknown name and an empty
// list. Discord's own keys are required as soon as a list has it.
func TestLoadConfig_ChatPlatformIsANameOrAList(t *testing.T) {
	const agent = "[agent]\ncommand = \"%s\"\n"
	discord := "[discord]\ntoken = \"t\"\nallowed_channels = [\"1\"]\n"
	for _, tc := range []struct {
		name, chat string
		env        []string
		want       []string
		err        string
	}{
		{name: "the default", want: []string{"console"}},
		{name: "a name", chat: `platform = "discord"`, want: []string{"discord"}},
		{name: "a list of one", chat: `platform = ["discord"]`, want: []string{"discord"}},
		{name: "from the environment", env: []string{"BROKER_CHAT_PLATFORM=discord"}, want: []string{"discord"}},
		{name: "the console with another", chat: `platform = ["discord", "console"]`,
			err: `chat.platform = [discord console]: the console is served alone`},
		{name: "the console with another from the environment", env: []string{"BROKER_CHAT_PLATFORM=console,discord"},
			err: `chat.platform = [console discord]: the console is served alone`},
		{name: "twice", chat: `platform = ["discord", "discord"]`, err: `chat.platform has "discord" twice`},
		{name: "unknown", chat: `platform = ["discord", "irc"]`, err: `chat.platform has "irc", which is not a chat platform: one of console, discord`},
		{name: "empty", chat: `platform = []`, err: "chat.platform is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(agent, "%s", fakeAgent, 1) + discord
			if tc.chat != "" {
				text += "[chat]\n" + tc.chat + "\n"
			}
			c, err := loadText(t, text, tc.env...)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err == "" && !slices.Equal(c.Chat.Platforms, tc.want):
				t.Fatalf("platforms %q, want %q", c.Chat.Platforms, tc.want)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	_, err := loadText(t, strings.Replace(agent, "%s", fakeAgent, 1)+"[chat]\nplatform = [\"discord\"]\n")
	if err == nil || !strings.Contains(err.Error(), "discord.token is required when chat.platform has \"discord\"") {
		t.Fatalf("a list with discord and no token: %v", err)
	}
}
