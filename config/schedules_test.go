package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// discordBase is a configuration of one Discord channel and the fake
// agent, for schedules and tokens to be added to.
func discordBase() string {
	return "[chat]\nplatform = \"discord\"\n[discord]\ntoken = \"t\"\nallowed_channels = [\"100\"]\n[agent]\ncommand = \"" + fakeAgent + "\"\n"
}

// A [[schedules]] table is read whole: its expression (cron with a time
// zone, a descriptor, an interval), its place, its profile, its mode and
// approvers, enabled by default and without catch-up.
func TestSchedules_TablesAreRead(t *testing.T) {
	c, err := loadText(t, discordBase()+`
[[schedules]]
name = "nightly"
schedule = "CRON_TZ=Europe/Paris 30 2 * * *"
channel = "100"
prompt = "check the dependencies"
permission_mode = "deny"
approvers = ["201"]

[[schedules]]
name = "often"
schedule = "@every 10m"
thread = "555"
prompt = "look"
enabled = false
catch_up = true

[[schedules]]
Name = "daily"
Schedule = "@daily"
channel = "100"
prompt = "summary"
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Schedules) != 3 {
		t.Fatalf("%d schedules read, want 3", len(c.Schedules))
	}
	n, o, d := c.Schedules[0], c.Schedules[1], c.Schedules[2]
	if n.Name != "nightly" || n.Platform != "discord" || n.Channel != "100" || n.PermissionMode != "deny" || !n.Enabled || n.CatchUp ||
		len(n.Approvers) != 1 || n.Approvers[0] != "201" || n.Prompt != "check the dependencies" {
		t.Errorf("nightly read as %+v", n)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	from := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	if next := n.When.Next(from); !next.Equal(time.Date(2026, 1, 11, 2, 30, 0, 0, paris)) {
		t.Errorf("nightly's next run after %s is %s, want 02:30 in Paris", from, next)
	}
	if o.Enabled || !o.CatchUp || o.Thread != "555" || o.When.Next(from).Sub(from) != 10*time.Minute {
		t.Errorf("often read as %+v (next in %s)", o, o.When.Next(from).Sub(from))
	}
	if d.Name != "daily" || !d.When.Next(from).Equal(time.Date(2026, 1, 11, 0, 0, 0, 0, time.Local)) {
		t.Errorf("daily read as %+v, next %s", d, d.When.Next(from))
	}
}

// Each bad value of a schedule names its key, schedules[N].field: a bad
// expression, a channel the bot does not serve, a profile that does not
// exist, a mode, two of one name, a key that does not exist.
func TestSchedules_BadValuesNameTheirKey(t *testing.T) {
	for _, tc := range []struct{ table, want string }{
		{"name = \"a\"\nschedule = \"61 * * * *\"\nchannel = \"100\"\nprompt = \"p\"", `schedules[0].schedule = "61 * * * *" is not a schedule`},
		{"name = \"a\"\nschedule = \"CRON_TZ=Mars/Olympus 0 1 * * *\"\nchannel = \"100\"\nprompt = \"p\"", `schedules[0].schedule = "CRON_TZ=Mars/Olympus 0 1 * * *" is not a schedule`},
		{"name = \"a\"\nschedule = \"@every 10ms\"\nchannel = \"100\"\nprompt = \"p\"", "schedules[0].schedule = \"@every 10ms\" is not a schedule"},
		{"name = \"a\"\nschedule = \"\"\nchannel = \"100\"\nprompt = \"p\"", "schedules[0].schedule = \"\" is not a schedule"},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"999\"\nprompt = \"p\"", `schedules[0].channel = "999" is not a channel the bot serves`},
		{"name = \"a\"\nschedule = \"@daily\"\nprompt = \"p\"", "schedules[0].channel is required"},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nthread = \"5\"\nprompt = \"p\"", "schedules[0].thread and channel are both set"},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\nagent = \"nope\"", `schedules[0].agent = "nope" is not a profile`},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\npermission_mode = \"maybe\"", `schedules[0].permission_mode = "maybe" must be one of`},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"", "schedules[0].prompt is required"},
		{"schedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"", "schedules[0].name is required"},
		{"name = \"a b\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"", `schedules[0].name = "a b" is not a schedule name`},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\nplatform = \"slack\"", `schedules[0].platform = "slack" is not a platform chat.platform serves`},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\nenabled = \"yes\"", "schedules[0].enabled must be true or false"},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\nevery = 3", "schedules[0] has unknown key(s): every"},
		{"name = \"a\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"\n[[schedules]]\nname = \"A\"\nschedule = \"@daily\"\nchannel = \"100\"\nprompt = \"p\"", `schedules[1].name = "A" is the name of schedules[0] too`},
	} {
		_, err := loadText(t, discordBase()+"[[schedules]]\n"+tc.table+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %q", tc.table, err, tc.want)
		}
	}
}

// [[api.tokens]] are read with what each may do; a token from a file;
// every bad value names its key; api.listen is off by default and not
// http.listen's; chat.platform = "none" needs the API.
func TestAPI_TokensAndListenAreRead(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ci.token")
	if err := os.WriteFile(file, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadText(t, discordBase()+`
[api]
listen = "127.0.0.1:9480"
rate_limit = 30

[[api.tokens]]
name = "deploy"
token = "deploy-token-0123456789"
channels = ["100"]
agents = ["*"]
may_approve = true

[[api.tokens]]
name = "ci"
token_file = "`+file+`"
channels = ["discord:100"]
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.API.Listen != "127.0.0.1:9480" || c.API.RateLimit != 30 || c.API.MaxBodyBytes != 1<<20 || len(c.API.Tokens) != 2 {
		t.Fatalf("api read as %+v", c.API)
	}
	d, ci := c.API.Tokens[0], c.API.Tokens[1]
	if !d.MayApprove || !d.MayUse("discord", "100") || d.MayUse("discord", "101") || !d.MayName("default") {
		t.Errorf("deploy read as %+v", d)
	}
	if ci.Token != "0123456789abcdef0123" || ci.MayApprove || !ci.MayUse("discord", "100") || ci.MayUse("slack", "100") || ci.MayName("default") {
		t.Errorf("ci read as %+v", ci)
	}
	if s := c.Secrets(); len(s) != 3 {
		t.Errorf("secrets %d, want the Discord token and both API tokens", len(s))
	}
	off, err := loadText(t, discordBase())
	if err != nil || off.API.Listen != "" {
		t.Errorf("the API without [api]: %q, %v", off.API.Listen, err)
	}

	for _, tc := range []struct{ text, want string }{
		{"[[api.tokens]]\nname = \"a\"\ntoken = \"short\"\nchannels = [\"*\"]", "api.tokens[0].token is shorter than 16 characters"},
		{"[[api.tokens]]\nname = \"a\"\nchannels = [\"*\"]", "api.tokens[0].token is required"},
		{"[[api.tokens]]\nname = \"a\"\ntoken = \"0123456789abcdefg\"", "api.tokens[0].channels is empty"},
		{"[[api.tokens]]\nname = \"a\"\ntoken = \"0123456789abcdefg\"\nchannels = [\"*\"]\nagents = [\"nope\"]", `api.tokens[0].agents has "nope", which is not a profile`},
		{"[[api.tokens]]\nname = \"a\"\ntoken = \"0123456789abcdefg\"\nchannels = [\"*\"]\n[[api.tokens]]\nname = \"b\"\ntoken = \"0123456789abcdefg\"\nchannels = [\"*\"]", "api.tokens[1].token is the token of api.tokens[0] too"},
		{"[[api.tokens]]\nname = \"a\"\ntoken = \"0123456789abcdefg\"\nchannels = [\"*\"]\nscope = 1", "api.tokens[0] has unknown key(s): scope"},
		{"[[api.tokens]]\nname = \"a\"\ntoken_file = \"/nonexistent/x\"\nchannels = [\"*\"]", "api.tokens[0].token_file cannot be read"},
		{"[api]\nlisten = \"nowhere\"", `api.listen = "nowhere" is not a host:port address`},
		{"[api]\nlisten = \"127.0.0.1:9464\"", `api.listen = "127.0.0.1:9464" is http.listen's address too`},
	} {
		_, err := loadText(t, discordBase()+tc.text+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %q", tc.text, err, tc.want)
		}
	}

	// A token's value is never in an error, a reload diff, or anything
	// the configuration says about itself.
	_, err = loadText(t, discordBase()+"[[api.tokens]]\nname = \"a\"\ntoken = \"secret-value-0123456789\"\nchannels = []\n")
	if err == nil || strings.Contains(err.Error(), "secret-value") {
		t.Errorf("an error about a token: %v", err)
	}

	none := "[chat]\nplatform = \"none\"\n[agent]\ncommand = \"" + fakeAgent + "\"\n"
	if _, err := loadText(t, none); err == nil || !strings.Contains(err.Error(), `chat.platform = "none" serves no chat: set api.listen`) {
		t.Errorf("none without the API: %v", err)
	}
	c, err = loadText(t, none+"[api]\nlisten = \"127.0.0.1:0\"\n[[api.tokens]]\nname = \"ci\"\ntoken = \"0123456789abcdefg\"\n")
	if err != nil || len(c.Chat.Platforms) != 0 {
		t.Errorf("none with the API: platforms %v, %v", c.Chat.Platforms, err)
	}
	if _, err := loadText(t, none+"[api]\nlisten = \"127.0.0.1:0\"\n[[schedules]]\nname = \"a\"\nschedule = \"@daily\"\nchannel = \"1\"\nprompt = \"p\"\n"); err == nil ||
		!strings.Contains(err.Error(), "schedules[0].platform has no chat platform to run on") {
		t.Errorf("a schedule without a chat: %v", err)
	}
}

// A reload takes the new schedules and tokens whole, and says so by name
// (a token's value never shown); api.rate_limit is live, api.listen not.
func TestAPI_ReloadTakesSchedulesAndTokens(t *testing.T) {
	old, err := loadText(t, discordBase()+"[api]\nlisten = \"127.0.0.1:9480\"\n[[api.tokens]]\nname = \"a\"\ntoken = \"first-token-0123456789\"\nchannels = [\"*\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	next, err := loadText(t, discordBase()+"[api]\nlisten = \"127.0.0.1:9481\"\nrate_limit = 5\n[[api.tokens]]\nname = \"a\"\ntoken = \"second-token-0123456789\"\nchannels = [\"*\"]\n"+
		"[[schedules]]\nname = \"s\"\nschedule = \"@hourly\"\nchannel = \"100\"\nprompt = \"p\"\n")
	if err != nil {
		t.Fatal(err)
	}
	applied, restart := Diff(old, next, func(s string) string { return s })
	all := strings.Join(append(applied, restart...), "\n")
	if strings.Contains(all, "first-token") || strings.Contains(all, "second-token") {
		t.Errorf("a diff shows a token:\n%s", all)
	}
	for _, want := range []string{"api.tokens.secrets", "schedules: [] -> [s:", "api.rate_limit: 120 -> 5"} {
		if !strings.Contains(strings.Join(applied, "\n"), want) {
			t.Errorf("applied does not have %q:\n%s", want, strings.Join(applied, "\n"))
		}
	}
	if !strings.Contains(strings.Join(restart, "\n"), "api.listen") {
		t.Errorf("api.listen not said to need a restart: %v", restart)
	}
	live := Live(old, next)
	if live.API.Listen != "127.0.0.1:9480" || live.API.RateLimit != 5 || len(live.Schedules) != 1 || live.API.Tokens[0].Token != "second-token-0123456789" {
		t.Errorf("live: listen %s rate %d schedules %d tokens %+v", live.API.Listen, live.API.RateLimit, len(live.Schedules), live.API.Tokens)
	}
}

// The web front end's keys are read, web_admin marks an API token, and
// a bad address or URL is refused naming its key.
func TestWeb_KeysAndAdminTokensAreRead(t *testing.T) {
	c, err := loadText(t, discordBase()+`
[web]
listen = "127.0.0.1:9490"
public_url = "https://broker.example.com"
session_ttl = "30m"

[[api.tokens]]
name = "ops"
token = "ops-token-0123456789"
channels = ["*"]
web_admin = true
`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Web.Listen != "127.0.0.1:9490" || c.Web.PublicURL != "https://broker.example.com" || c.Web.SessionTTL != 30*time.Minute {
		t.Errorf("web read as %+v", c.Web)
	}
	if len(c.API.Tokens) != 1 || !c.API.Tokens[0].WebAdmin {
		t.Errorf("tokens read as %+v", c.API.Tokens)
	}
	off, err := loadText(t, discordBase())
	if err != nil || off.Web.Listen != "" || off.Web.SessionTTL != 12*time.Hour {
		t.Errorf("without [web]: %+v, %v", off.Web, err)
	}
	for key, bad := range map[string]string{
		"web.listen":      "[web]\nlisten = \"nowhere\"\n",
		"web.public_url":  "[web]\npublic_url = \"javascript:alert(1)\"\n",
		"web.session_ttl": "[web]\nsession_ttl = \"1s\"\n",
	} {
		if _, err := loadText(t, discordBase()+"\n"+bad); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming it", key, err)
		}
	}
}
