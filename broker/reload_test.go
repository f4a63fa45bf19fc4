package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/config"
)

// liveKeyChecks say, for each key a reload applies, a value other than
// its default (as TOML) and where the running broker shows it: in the
// part that consumes it, not in the configuration read.
var liveKeyChecks = map[string]struct {
	value string
	want  any
	got   func(b *Broker, level *levelRecorder) any
}{
	"log.level":                  {`"debug"`, "debug", func(_ *Broker, l *levelRecorder) any { return l.get() }},
	"turn.timeout":               {`"7m"`, 7 * time.Minute, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().TurnTimeout }},
	"turn.liveness_interval":     {`"7s"`, 7 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().LivenessInterval }},
	"turn.cancel_grace":          {`"3s"`, 3 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().CancelGrace }},
	"turn.tool_timeout":          {`"4m"`, 4 * time.Minute, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().ToolTimeout }},
	"turn.queue_size":            {`3`, 3, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().QueueSize }},
	"turn.busy":                  {`"interrupt"`, "interrupt", func(b *Broker, _ *levelRecorder) any { return b.engine.Config().Busy }},
	"turn.permission_mode":       {`"deny"`, "deny", func(b *Broker, _ *levelRecorder) any { return b.engine.Config().PermissionMode }},
	"turn.permission_timeout":    {`"9s"`, 9 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().PermissionTimeout }},
	"pool.slot_wait":             {`"11s"`, 11 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().SlotWait }},
	"watchdog.interval":          {`"2s"`, 2 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.engine.Config().WatchdogInterval }},
	"shutdown.grace":             {`"12s"`, 12 * time.Second, func(b *Broker, _ *levelRecorder) any { return b.Config().Shutdown.Grace }},
	"discord.allowed_channels":   {`["5", "6"]`, []string{"5", "6"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().AllowedChannels }},
	"discord.allow_all_channels": {`true`, true, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().AllowAllChannels }},
	"discord.allowed_users":      {`["21"]`, []string{"21"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().AllowedUsers }},
	"discord.allowed_roles":      {`["31"]`, []string{"31"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().AllowedRoles }},
	"discord.approvers":          {`["22"]`, []string{"22"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().Approvers }},
	"discord.approver_roles":     {`["32"]`, []string{"32"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().ApproverRoles }},
	"discord.allowed_bots":       {`["41"]`, []string{"41"}, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().AllowedBots }},
	"discord.show_thoughts":      {`true`, true, func(b *Broker, _ *levelRecorder) any { return discordOf(b).Access().ShowThoughts }},
	"agents.default":             {`"b"`, "b", func(b *Broker, _ *levelRecorder) any { return b.pool.Stats().DefaultProfile }},
	"api.rate_limit":             {`7`, 7, func(b *Broker, _ *levelRecorder) any { return b.api.Config().RateLimit }},
	"api.max_body_bytes":         {`4096`, int64(4096), func(b *Broker, _ *levelRecorder) any { return b.api.Config().MaxBodyBytes }},
	"api.max_streams":            {`5`, 5, func(b *Broker, _ *levelRecorder) any { return b.api.Config().MaxStreams }},
	"slack.allowed_channels":     {`["C5", "C6"]`, []string{"C5", "C6"}, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().AllowedChannels }},
	"slack.allow_all_channels":   {`true`, true, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().AllowAllChannels }},
	"slack.allowed_users":        {`["U21"]`, []string{"U21"}, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().AllowedUsers }},
	"slack.allowed_groups":       {`["S31"]`, []string{"S31"}, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().AllowedRoles }},
	"slack.approvers":            {`["U22"]`, []string{"U22"}, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().Approvers }},
	"slack.approver_groups":      {`["S32"]`, []string{"S32"}, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().ApproverRoles }},
	"slack.allow_dms":            {`true`, true, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().AllowDMs }},
	"slack.show_thoughts":        {`true`, true, func(b *Broker, _ *levelRecorder) any { return slackOf(b).Access().ShowThoughts }},
}

// Every key the table marks as changed by a reload is changed by one:
// the broker reloads a file in which each has a new value, and the part
// that consumes it (the engine, the Discord access lists, the log level,
// the shutdown) has it. A key marked so without a check here fails the
// test, and so does a key checked here that the table does not mark.
func TestReload_EveryLiveKeyTakesEffect(t *testing.T) {
	dir := t.TempDir()
	base := map[string]string{
		"chat.platform":            `["discord", "slack"]`,
		"discord.token":            `"t0ken"`,
		"slack.bot_token":          `"xoxb-t0ken"`,
		"slack.app_token":          `"xapp-t0ken"`,
		"slack.api_url":            `"http://127.0.0.1:1/api/"`,
		"slack.allowed_channels":   `["C1"]`,
		"discord.api_url":          `"http://127.0.0.1:1/api/v9/"`,
		"discord.allowed_channels": `["1"]`,
		"agent.command":            fmt.Sprintf("%q", fakeAgent),
		"agent.cwd":                fmt.Sprintf("%q", filepath.Join(dir, "work")),
		"agent.sandbox":            `"none"`,
		"state.dir":                fmt.Sprintf("%q", filepath.Join(dir, "state")),
		"http.listen":              `""`,
		"api.listen":               `"127.0.0.1:0"`,
		"agents.default":           `"a"`,
		"agents.a.env":             `["WHO=a"]`,
		"agents.b.env":             `["WHO=b"]`,
	}
	path := filepath.Join(dir, "broker.toml")
	if err := os.WriteFile(path, []byte(tomlOf(base)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var level levelRecorder
	b := openBroker(t, cfg, Options{Logger: testLog(t), SetLevel: level.set})

	changed := map[string]string{}
	for k, v := range base {
		changed[k] = v
	}
	for _, k := range config.Keys() {
		check, ok := liveKeyChecks[k.Name]
		switch {
		case k.Live && !ok:
			t.Errorf("%s is marked as changed by a reload, but nothing here checks that it is", k.Name)
		case !k.Live && ok:
			t.Errorf("%s is checked here, but the key table says a change needs a restart", k.Name)
		case ok:
			if reflect.DeepEqual(check.got(b, &level), check.want) {
				t.Fatalf("%s is %v before the reload already", k.Name, check.want)
			}
			changed[k.Name] = check.value
		}
	}
	if err := os.WriteFile(path, []byte(tomlOf(changed)), 0o600); err != nil {
		t.Fatal(err)
	}
	res := b.prepareReload(context.Background())
	if res.err != nil {
		t.Fatal(res.err)
	}
	b.applyReload(res)
	for name, check := range liveKeyChecks {
		if got := check.got(b, &level); !reflect.DeepEqual(got, check.want) {
			t.Errorf("after the reload %s is %v in the running broker, want %v", name, got, check.want)
		}
	}
}

// levelRecorder keeps the log level a broker last set.
type levelRecorder struct {
	mu    sync.Mutex
	level string
}

func (l *levelRecorder) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.level
}

func (l *levelRecorder) set(level string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.level = level
}

// A reload is checked as a start is: a profile whose workspace would
// show the broker's state is refused, and the running profiles stay.
func TestReload_APathShowingABrokerFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	conf := map[string]string{
		"agent.command":  fmt.Sprintf("%q", fakeAgent),
		"agent.cwd":      fmt.Sprintf("%q", filepath.Join(dir, "work")),
		"agent.sandbox":  `"none"`,
		"state.dir":      fmt.Sprintf("%q", state),
		"http.listen":    `""`,
		"agents.default": `"a"`,
		"agents.a.env":   `["WHO=a"]`,
	}
	path := filepath.Join(dir, "broker.toml")
	if err := os.WriteFile(path, []byte(tomlOf(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	conf["agents.b.cwd"] = fmt.Sprintf("%q", dir)
	conf["agents.b.per_thread_dir"] = "false"
	if err := os.WriteFile(path, []byte(tomlOf(conf)), 0o600); err != nil {
		t.Fatal(err)
	}
	res := b.prepareReload(context.Background())
	want := fmt.Sprintf("agents.b.cwd = %q shows state.dir %q", dir, state)
	if res.err == nil || !strings.Contains(res.err.Error(), want) {
		t.Fatalf("the reload: %v\nwant %q", res.err, want)
	}
}
