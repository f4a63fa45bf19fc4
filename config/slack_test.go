package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// slackConf is a configuration serving Slack in Socket Mode from one
// channel, with extra lines in [slack], and more tables after ([chat]:
// "slack" when they have none).
func slackConf(slack, after string) string {
	if !strings.Contains(after, "[chat]") {
		after += "[chat]\nplatform = \"slack\"\n"
	}
	return "[agent]\ncommand = \"" + fakeAgent + "\"\n[slack]\n" +
		"bot_token = \"xoxb-1\"\napp_token = \"xapp-1\"\nallowed_channels = [\"C1\"]\n" + slack + "\n" + after
}

// A broker told to serve Slack without what Slack needs is refused
// before it starts, naming the key: the bot token; the app-level token
// in Socket Mode; the signing secret and an address of its own in http
// mode; somewhere to answer. Each is satisfied by the key it names (or
// its environment and file forms).
func TestLoadConfig_SlackWithoutWhatItNeedsIsRefusedNamingTheKey(t *testing.T) {
	base := "[agent]\ncommand = \"" + fakeAgent + "\"\n[chat]\nplatform = \"slack\"\n"
	for _, tc := range []struct {
		name, conf string
		env        []string
		err        string // "": accepted
	}{
		{"no bot token", "[slack]\napp_token = \"x\"\nallowed_channels = [\"C1\"]", nil,
			`slack.bot_token is required when chat.platform has "slack"`},
		{"no app token", "[slack]\nbot_token = \"x\"\nallowed_channels = [\"C1\"]", nil,
			`slack.app_token is required with slack.mode = "socket"`},
		{"tokens from the environment", "[slack]\nallowed_channels = [\"C1\"]",
			[]string{"BROKER_SLACK_BOT_TOKEN=xoxb-e", "BROKER_SLACK_APP_TOKEN=xapp-e"}, ""},
		{"http without a secret", "[slack]\nbot_token = \"x\"\nmode = \"http\"\nlisten = \"127.0.0.1:3000\"\nallowed_channels = [\"C1\"]", nil,
			`slack.signing_secret is required with slack.mode = "http"`},
		{"http without an address", "[slack]\nbot_token = \"x\"\nmode = \"http\"\nallowed_channels = [\"C1\"]",
			[]string{"BROKER_SLACK_SIGNING_SECRET=s"}, `slack.listen is required with slack.mode = "http"`},
		{"http on the metrics' address", "[slack]\nbot_token = \"x\"\nmode = \"http\"\nsigning_secret = \"s\"\nlisten = \"127.0.0.1:9464\"\nallowed_channels = [\"C1\"]", nil,
			`slack.listen = "127.0.0.1:9464" is http.listen's address too`},
		{"http needs no app token", "[slack]\nbot_token = \"x\"\nmode = \"http\"\nsigning_secret = \"s\"\nlisten = \"127.0.0.1:3000\"\nallowed_channels = [\"C1\"]", nil, ""},
		{"nowhere to answer", "[slack]\nbot_token = \"x\"\napp_token = \"y\"", nil, "slack.allowed_channels is empty"},
		{"a Discord channel's profile is not Slack's", "[slack]\nbot_token = \"x\"\napp_token = \"y\"\n[channels.\"123\"]\nagent = \"default\"", nil,
			"slack.allowed_channels is empty"},
		{"a Slack channel's profile", "[slack]\nbot_token = \"x\"\napp_token = \"y\"\n[channels.\"C0AB\"]\nagent = \"default\"", nil, ""},
		{"every channel", "[slack]\nbot_token = \"x\"\napp_token = \"y\"\nallow_all_channels = true", nil, ""},
		{"direct messages alone", "[slack]\nbot_token = \"x\"\napp_token = \"y\"\nallow_dms = true", nil, ""},
		{"a Slack channel's profile is not Discord's", "[discord]\ntoken = \"t\"\n[slack]\nbot_token = \"x\"\napp_token = \"y\"\n[channels.\"C0AB\"]\nagent = \"default\"",
			[]string{"BROKER_CHAT_PLATFORM=discord,slack"},
			"discord.allowed_channels is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadText(t, base+tc.conf+"\n", tc.env...)
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
	// Not served, Slack needs nothing.
	if _, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[slack]\nmode = \"http\"\n"); err != nil {
		t.Fatalf("Slack not served: %v", err)
	}
}

// Every bad value of a [slack] key is refused naming the key, all of
// them at once.
func TestLoadConfig_SlackBadValuesNameTheirKeys(t *testing.T) {
	_, err := loadText(t, slackConf(`mode = "rtm"
api_url = "slack.com/api"
listen = "nowhere"
edit_interval = "50ms"
max_answer_messages = 0
max_image_bytes = 0
max_file_bytes = 104857600
max_text_bytes = "lots"
allowed_users = 7
allow_dms = "maybe"
bot_token_file = "/nonexistent/bot"`, ""))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`slack.mode = "rtm" must be one of socket, http`,
		`slack.api_url = "slack.com/api" is not an http(s) URL like https://slack.com/api/`,
		`slack.listen = "nowhere" is not a host:port address`,
		`slack.edit_interval = 50ms is out of range`,
		`slack.max_answer_messages = 0 is out of range [1, 50]`,
		`slack.max_image_bytes = 0 is out of range`,
		`slack.max_file_bytes = 104857600 is out of range [1024, 52428800]`,
		`slack.max_text_bytes must be a whole number`,
		`slack.allow_dms must be true or false`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nlacks %q", err, want)
		}
	}
	// The token itself wins over its file, which is then not read.
	if _, err := loadText(t, slackConf(`bot_token_file = "/nonexistent/bot"`, "")); err != nil {
		t.Errorf("a bot token and a file not read: %v", err)
	}
	_, err = loadText(t, strings.Replace(slackConf(`bot_token_file = "/nonexistent/bot"`, ""), "bot_token = \"xoxb-1\"\n", "", 1))
	if err == nil || !strings.Contains(err.Error(), "slack.bot_token_file cannot be read") {
		t.Errorf("an unreadable bot token file: %v", err)
	}
}

// Each Slack secret can come from a file (a systemd credential), and
// the file is where it was read from; the secret itself, in the file or
// the environment, wins over it.
func TestLoadConfig_SlackSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	file := func(name, secret string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(secret+"\n"), 0o600)
		return p
	}
	bot, app, sign := file("bot", "xoxb-from-file"), file("app", "xapp-from-file"), file("sign", "sign-from-file")
	c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[chat]\nplatform = \"slack\"\n[slack]\nallowed_channels = [\"C1\"]\n"+
		fmt.Sprintf("bot_token_file = %q\napp_token_file = %q\nsigning_secret_file = %q\n", bot, app, sign))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Slack
	got := []string{s.BotToken, s.BotTokenFile, s.AppToken, s.AppTokenFile, s.SigningSecret, s.SigningSecretFile}
	if want := []string{"xoxb-from-file", bot, "xapp-from-file", app, "sign-from-file", sign}; !slices.Equal(got, want) {
		t.Fatalf("read %q, want %q", got, want)
	}
	c, err = loadText(t, fmt.Sprintf("[agent]\ncommand = %q\n[slack]\nbot_token_file = %q\n", fakeAgent, bot), "BROKER_SLACK_BOT_TOKEN=xoxb-env")
	if err != nil || c.Slack.BotToken != "xoxb-env" || c.Slack.BotTokenFile != "" {
		t.Fatalf("the token from the environment and a file: %q from %q, %v", c.Slack.BotToken, c.Slack.BotTokenFile, err)
	}
}

// A Slack channel's id keeps its case in [channels."ID"] (keys are read
// in lower case), so that the channel is the one Slack names.
func TestLoadConfig_SlackChannelIDsKeepTheirCase(t *testing.T) {
	c, err := loadText(t, slackConf("", "[channels.\"C0ABC123\"]\nagent = \"default\"\n[channels.\"123456\"]\nagent = \"default\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"C0ABC123": "default", "123456": "default"}; !equalMaps(c.Channels, want) {
		t.Fatalf("channels %v, want %v", c.Channels, want)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A reload's diff names a changed Slack secret and never shows it, old
// or new.
func TestDiff_SlackSecretsAreNamedNotShown(t *testing.T) {
	const (
		before = "[slack]\nbot_token = \"xoxb-old-secret\"\napp_token = \"xapp-old-secret\"\nsigning_secret = \"old-secret\"\n"
		after  = "[slack]\nbot_token = \"xoxb-new-secret\"\napp_token = \"xapp-new-secret\"\nsigning_secret = \"new-secret\"\nallowed_users = [\"U1\"]\n"
	)
	running, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n"+before)
	if err != nil {
		t.Fatal(err)
	}
	next, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n"+after)
	if err != nil {
		t.Fatal(err)
	}
	applied, restart := Diff(running, next, func(s string) string { return s })
	all := strings.Join(append(applied, restart...), "\n")
	for _, v := range []string{"old-secret", "new-secret"} {
		if strings.Contains(all, v) {
			t.Errorf("the diff shows a secret:\n%s", all)
		}
	}
	for _, k := range []string{"slack.bot_token", "slack.app_token", "slack.signing_secret"} {
		if !slices.Contains(restart, k) {
			t.Errorf("the diff does not name %s as needing a restart: %q", k, restart)
		}
	}
	if !slices.Contains(applied, "slack.allowed_users: [] -> [U1]") {
		t.Errorf("the access list's change is not applied: %q", applied)
	}
}

// chat.platform takes "slack" alone, or with "discord" in a list; not
// with the console.
func TestLoadConfig_ChatPlatformTakesSlack(t *testing.T) {
	discord := "[discord]\ntoken = \"t\"\nallowed_channels = [\"1\"]\n"
	for _, tc := range []struct {
		chat string
		want []string
		err  string
	}{
		{`platform = "slack"`, []string{"slack"}, ""},
		{`platform = ["discord", "slack"]`, []string{"discord", "slack"}, ""},
		{`platform = ["slack", "discord"]`, []string{"slack", "discord"}, ""},
		{`platform = ["slack", "console"]`, nil, "the console is served alone"},
	} {
		c, err := loadText(t, slackConf("", discord+"[chat]\n"+tc.chat+"\n"))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.chat, err)
		case tc.err == "" && !slices.Equal(c.Chat.Platforms, tc.want):
			t.Errorf("%s: platforms %q", tc.chat, c.Chat.Platforms)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: err = %v, want %q", tc.chat, err, tc.err)
		}
	}
}

// A schedule on Slack runs in a channel the app serves: one of
// slack.allowed_channels or of [channels."ID"] is taken, any other is
// refused naming the schedule's key.
func TestSchedules_OnSlackOnlyInChannelsTheAppServes(t *testing.T) {
	table := func(channel string) string {
		return "[[schedules]]\nname = \"a\"\nschedule = \"@daily\"\nchannel = \"" + channel + "\"\nprompt = \"p\"\n"
	}
	if _, err := loadText(t, slackConf("", table("C1"))); err != nil {
		t.Errorf("a schedule in slack.allowed_channels' C1: %v", err)
	}
	if _, err := loadText(t, slackConf("", "[channels.\"C2\"]\nagent = \"default\"\n"+table("C2"))); err != nil {
		t.Errorf("a schedule in C2, given a profile: %v", err)
	}
	_, err := loadText(t, slackConf("", table("C9")))
	if err == nil || !strings.Contains(err.Error(), `schedules[0].channel = "C9" is not a channel the app serves: list it in slack.allowed_channels`) {
		t.Errorf("a schedule in C9: %v", err)
	}
}
