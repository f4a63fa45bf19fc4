package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// liveKeyChecks say, for each key a reload applies, a value other than
// its default (as TOML) and where the running broker shows it: in the
// part that consumes it, not in the configuration read.
var liveKeyChecks = map[string]struct {
	value string
	want  any
	got   func(b *broker) any
}{
	"log.level":                  {`"debug"`, int32(zerolog.DebugLevel), func(b *broker) any { return b.level.level.Load() }},
	"turn.timeout":               {`"7m"`, 7 * time.Minute, func(b *broker) any { return b.engine.Config().TurnTimeout }},
	"turn.liveness_interval":     {`"7s"`, 7 * time.Second, func(b *broker) any { return b.engine.Config().LivenessInterval }},
	"turn.cancel_grace":          {`"3s"`, 3 * time.Second, func(b *broker) any { return b.engine.Config().CancelGrace }},
	"turn.tool_timeout":          {`"4m"`, 4 * time.Minute, func(b *broker) any { return b.engine.Config().ToolTimeout }},
	"turn.queue_size":            {`3`, 3, func(b *broker) any { return b.engine.Config().QueueSize }},
	"turn.permission_mode":       {`"deny"`, "deny", func(b *broker) any { return b.engine.Config().PermissionMode }},
	"turn.permission_timeout":    {`"9s"`, 9 * time.Second, func(b *broker) any { return b.engine.Config().PermissionTimeout }},
	"pool.slot_wait":             {`"11s"`, 11 * time.Second, func(b *broker) any { return b.engine.Config().SlotWait }},
	"watchdog.interval":          {`"2s"`, 2 * time.Second, func(b *broker) any { return b.engine.Config().WatchdogInterval }},
	"shutdown.grace":             {`"12s"`, 12 * time.Second, func(b *broker) any { return b.cfg.Shutdown.Grace }},
	"discord.allowed_channels":   {`["5", "6"]`, []string{"5", "6"}, func(b *broker) any { return b.discord.Access().AllowedChannels }},
	"discord.allow_all_channels": {`true`, true, func(b *broker) any { return b.discord.Access().AllowAllChannels }},
	"discord.allowed_users":      {`["21"]`, []string{"21"}, func(b *broker) any { return b.discord.Access().AllowedUsers }},
	"discord.allowed_roles":      {`["31"]`, []string{"31"}, func(b *broker) any { return b.discord.Access().AllowedRoles }},
	"discord.approvers":          {`["22"]`, []string{"22"}, func(b *broker) any { return b.discord.Access().Approvers }},
	"discord.approver_roles":     {`["32"]`, []string{"32"}, func(b *broker) any { return b.discord.Access().ApproverRoles }},
	"discord.allowed_bots":       {`["41"]`, []string{"41"}, func(b *broker) any { return b.discord.Access().AllowedBots }},
	"discord.show_thoughts":      {`true`, true, func(b *broker) any { return b.discord.Access().ShowThoughts }},
	"agents.default":             {`"b"`, "b", func(b *broker) any { return b.pool.Stats().DefaultProfile }},
}

// tomlOf renders keys ("table.key" = TOML value) as tables.
func tomlOf(values map[string]string) string {
	tables := map[string][]string{}
	for k, v := range values {
		table, key, _ := strings.Cut(k, ".")
		tables[table] = append(tables[table], key+" = "+v)
	}
	var b strings.Builder
	for _, name := range sortedKeys(tables) {
		fmt.Fprintf(&b, "[%s]\n%s\n", name, strings.Join(tables[name], "\n"))
	}
	return b.String()
}

// Every key the table marks as changed by a reload is changed by one:
// the broker reloads a file in which each has a new value, and the part
// that consumes it (the engine, the Discord access lists, the log level,
// the shutdown) has it. A key marked so without a check here fails the
// test, and so does a key checked here that the table does not mark.
func TestReload_EveryLiveKeyTakesEffect(t *testing.T) {
	dir := t.TempDir()
	base := map[string]string{
		"chat.platform":            `"discord"`,
		"discord.token":            `"t0ken"`,
		"discord.api_url":          `"http://127.0.0.1:1/api/v9/"`,
		"discord.allowed_channels": `["1"]`,
		"agent.command":            fmt.Sprintf("%q", fakeAgent),
		"agent.cwd":                fmt.Sprintf("%q", filepath.Join(dir, "work")),
		"agent.sandbox":            `"none"`,
		"state.dir":                fmt.Sprintf("%q", filepath.Join(dir, "state")),
		"http.listen":              `""`,
		"agents.default":           `"a"`,
		"agents.a.env":             `["WHO=a"]`,
		"agents.b.env":             `["WHO=b"]`,
	}
	path := filepath.Join(dir, "broker.toml")
	if err := os.WriteFile(path, []byte(tomlOf(base)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	log, level := newLogger("json", cfg.Log.Level, io.Discard)
	b, err := open(cfg, path, nil, log, level, strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop(context.Background())

	changed := map[string]string{}
	for k, v := range base {
		changed[k] = v
	}
	for _, k := range keys {
		check, ok := liveKeyChecks[k.name]
		switch {
		case k.live && !ok:
			t.Errorf("%s is marked as changed by a reload, but nothing here checks that it is", k.name)
		case !k.live && ok:
			t.Errorf("%s is checked here, but the key table says a change needs a restart", k.name)
		case ok:
			if reflect.DeepEqual(check.got(b), check.want) {
				t.Fatalf("%s is %v before the reload already", k.name, check.want)
			}
			changed[k.name] = check.value
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
		if got := check.got(b); !reflect.DeepEqual(got, check.want) {
			t.Errorf("after the reload %s is %v in the running broker, want %v", name, got, check.want)
		}
	}
}
