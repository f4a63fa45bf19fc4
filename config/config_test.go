package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

// Every configuration key can be set from the environment as BROKER_ plus
// the key in upper case with dots as underscores, and the value lands in
// the configuration. The table must name every key there is.
func TestLoadConfig_EveryKeyCanBeSetFromTheEnvironment(t *testing.T) {
	bin := t.TempDir()
	agent := filepath.Join(bin, "my-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(bin, "token")
	os.WriteFile(tokenFile, []byte("from-file\n"), 0o600)
	cases := map[string]struct {
		env  string
		got  func(*Config) any
		want any
	}{
		"log.level":                   {"debug", func(c *Config) any { return c.Log.Level }, "debug"},
		"log.format":                  {"json", func(c *Config) any { return c.Log.Format }, "json"},
		"chat.platform":               {"discord", func(c *Config) any { return c.Chat.Platforms }, []string{"discord"}},
		"agent.command":               {"my-agent", func(c *Config) any { return c.Agent.Command }, "my-agent"},
		"agent.args":                  {"--a,--b", func(c *Config) any { return c.Agent.Args }, []string{"--a", "--b"}},
		"agent.env":                   {"K=v,L=w", func(c *Config) any { return c.Agent.Env }, map[string]string{"K": "v", "L": "w"}},
		"agent.cwd":                   {"/srv/work", func(c *Config) any { return c.Agent.Cwd }, "/srv/work"},
		"agent.per_thread_dir":        {"false", func(c *Config) any { return c.Agent.PerThreadDir }, false},
		"agent.auth_method":           {"api-key", func(c *Config) any { return c.Agent.AuthMethod }, "api-key"},
		"agent.start_timeout":         {"90s", func(c *Config) any { return c.Agent.StartTimeout }, 90 * time.Second},
		"agent.exit_grace":            {"3s", func(c *Config) any { return c.Agent.ExitGrace }, 3 * time.Second},
		"agent.max_line_bytes":        {"67108864", func(c *Config) any { return c.Agent.MaxLineBytes }, 64 << 20},
		"agent.max_read_bytes":        {"4096", func(c *Config) any { return c.Agent.MaxReadBytes }, 4096},
		"agent.max_write_bytes":       {"8192", func(c *Config) any { return c.Agent.MaxWriteBytes }, 8192},
		"agent.max_requests":          {"8", func(c *Config) any { return c.Agent.MaxRequests }, 8},
		"agent.max_terminals":         {"3", func(c *Config) any { return c.Agent.MaxTerminals }, 3},
		"agent.max_terminal_bytes":    {"65536", func(c *Config) any { return c.Agent.MaxTerminalBytes }, 65536},
		"web.listen":                  {"127.0.0.1:9490", func(c *Config) any { return c.Web.Listen }, "127.0.0.1:9490"},
		"web.public_url":              {"https://b.example.com/", func(c *Config) any { return c.Web.PublicURL }, "https://b.example.com"},
		"web.session_ttl":             {"2h", func(c *Config) any { return c.Web.SessionTTL }, 2 * time.Hour},
		"web.trusted_proxies":         {"10.0.0.0/8,192.168.1.7", func(c *Config) any { return c.Web.TrustedProxies }, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32")}},
		"turn.timeout":                {"5m", func(c *Config) any { return c.Turn.Timeout }, 5 * time.Minute},
		"turn.liveness_interval":      {"10s", func(c *Config) any { return c.Turn.LivenessInterval }, 10 * time.Second},
		"turn.cancel_grace":           {"4s", func(c *Config) any { return c.Turn.CancelGrace }, 4 * time.Second},
		"turn.queue_size":             {"3", func(c *Config) any { return c.Turn.QueueSize }, 3},
		"turn.busy":                   {"interrupt", func(c *Config) any { return c.Turn.Busy }, "interrupt"},
		"agent.busy":                  {"queue", func(c *Config) any { return c.Profiles["default"].Busy }, "queue"},
		"agent.fork_max_size":         {"16MiB", func(c *Config) any { return c.Profiles["default"].ForkMaxSize }, int64(16 << 20)},
		"turn.update_queue":           {"64", func(c *Config) any { return c.Turn.UpdateQueue }, 64},
		"turn.permission_mode":        {"deny", func(c *Config) any { return c.Turn.PermissionMode }, "deny"},
		"turn.permission_timeout":     {"2m", func(c *Config) any { return c.Turn.PermissionTimeout }, 2 * time.Minute},
		"pool.max_sessions":           {"3", func(c *Config) any { return c.Pool.MaxSessions }, 3},
		"pool.idle_timeout":           {"1h", func(c *Config) any { return c.Pool.IdleTimeout }, time.Hour},
		"pool.slot_wait":              {"20s", func(c *Config) any { return c.Pool.SlotWait }, 20 * time.Second},
		"state.dir":                   {"/var/lib/x", func(c *Config) any { return c.State.Dir }, "/var/lib/x"},
		"discord.token":               {"tok", func(c *Config) any { return c.Discord.Token }, "tok"},
		"discord.api_url":             {"http://127.0.0.1:9/api/v9/", func(c *Config) any { return c.Discord.APIURL }, "http://127.0.0.1:9/api/v9/"},
		"discord.allowed_channels":    {"1,2", func(c *Config) any { return c.Discord.AllowedChannels }, []string{"1", "2"}},
		"discord.allow_all_channels":  {"true", func(c *Config) any { return c.Discord.AllowAllChannels }, true},
		"discord.allowed_users":       {"u1 u2", func(c *Config) any { return c.Discord.AllowedUsers }, []string{"u1", "u2"}},
		"discord.allowed_roles":       {"r1", func(c *Config) any { return c.Discord.AllowedRoles }, []string{"r1"}},
		"discord.approvers":           {"a1", func(c *Config) any { return c.Discord.Approvers }, []string{"a1"}},
		"discord.approver_roles":      {"r1", func(c *Config) any { return c.Discord.ApproverRoles }, []string{"r1"}},
		"discord.allowed_bots":        {"b1", func(c *Config) any { return c.Discord.AllowedBots }, []string{"b1"}},
		"discord.edit_interval":       {"2s", func(c *Config) any { return c.Discord.EditInterval }, 2 * time.Second},
		"discord.max_answer_messages": {"3", func(c *Config) any { return c.Discord.MaxMessages }, 3},
		"discord.max_image_bytes":     {"1024", func(c *Config) any { return c.Discord.MaxImageBytes }, int64(1024)},
		"discord.max_file_bytes":      {"2048", func(c *Config) any { return c.Discord.MaxFileBytes }, 2048},
		"discord.max_text_bytes":      {"2048", func(c *Config) any { return c.Discord.MaxTextBytes }, int64(2048)},
		"turn.tool_timeout":           {"20m", func(c *Config) any { return c.Turn.ToolTimeout }, 20 * time.Minute},
		"state.retention":             {"48h", func(c *Config) any { return c.State.Retention }, 48 * time.Hour},
		"watchdog.interval":           {"5s", func(c *Config) any { return c.Watchdog.Interval }, 5 * time.Second},
		"http.listen":                 {"127.0.0.1:0", func(c *Config) any { return c.HTTP.Listen }, "127.0.0.1:0"},
		"api.listen":                  {"127.0.0.1:9480", func(c *Config) any { return c.API.Listen }, "127.0.0.1:9480"},
		"api.rate_limit":              {"7", func(c *Config) any { return c.API.RateLimit }, 7},
		"api.max_body_bytes":          {"4096", func(c *Config) any { return c.API.MaxBodyBytes }, int64(4096)},
		"api.max_connections":         {"77", func(c *Config) any { return c.API.MaxConnections }, 77},
		"api.max_streams":             {"5", func(c *Config) any { return c.API.MaxStreams }, 5},
		"discord.token_file":          {tokenFile, func(c *Config) any { return c.Discord.Token }, "tok"},
		"agent.restart_after_cancel":  {"true", func(c *Config) any { return c.Agent.RestartAfterCancel }, true},
		"agent.sandbox":               {"none", func(c *Config) any { return c.Agent.Sandbox }, "none"},
		"agent.sandbox_ro":            {"/opt/a", func(c *Config) any { return c.Agent.SandboxRO }, []string{"/opt/a"}},
		"agent.sandbox_rw":            {"/var/cache/b", func(c *Config) any { return c.Agent.SandboxRW }, []string{"/var/cache/b"}},
		"agent.sandbox_network":       {"false", func(c *Config) any { return c.Agent.SandboxNetwork }, false},
		"agent.network":               {"host", func(c *Config) any { return c.Profiles["default"].Network }, "host"},
		"agent.allow_hosts":           {"api.example.com,*.example.org:8443", func(c *Config) any { return c.Profiles["default"].AllowHosts }, []string{"api.example.com", "*.example.org:8443"}},
		"agent.launcher":              {"sh", func(c *Config) any { return c.Agent.Launcher }, []string{"sh"}},
		"agent.launcher_stop":         {"true", func(c *Config) any { return c.Agent.LauncherStop }, []string{"true"}},
		"agent.run_as_user":           {"nobody", func(c *Config) any { return c.Agent.RunAsUser }, "nobody"},
		"shutdown.grace":              {"20s", func(c *Config) any { return c.Shutdown.Grace }, 20 * time.Second},
		"discord.show_thoughts":       {"true", func(c *Config) any { return c.Discord.ShowThoughts }, true},
		"agent.description":           {"the one", func(c *Config) any { return c.Profiles["default"].Description }, "the one"},
		"agent.workspace":             {"worktree", func(c *Config) any { return c.Profiles["default"].Workspace }, "worktree"},
		"agent.repo":                  {"/srv/repo", func(c *Config) any { return c.Profiles["default"].Repo }, "/srv/repo"},
		"agent.base":                  {"main", func(c *Config) any { return c.Profiles["default"].Base }, "main"},
		"agent.shared_repo":           {"ssh://git@code.example.com/team/repo.git", func(c *Config) any { return c.Profiles["default"].SharedRepo }, "ssh://git@code.example.com/team/repo.git"},
		"agent.delete_branches":       {"true", func(c *Config) any { return c.Profiles["default"].DeleteBranches }, true},
		"agent.max_sessions":          {"2", func(c *Config) any { return c.Profiles["default"].MaxSessions }, 2},
		"agent.memory_max":            {"512MiB", func(c *Config) any { return c.Profiles["default"].MemoryMax }, int64(512 << 20)},
		"agent.pids_max":              {"0", func(c *Config) any { return c.Profiles["default"].PidsMax }, int64(0)},
		"agents.default":              {"default", func(c *Config) any { return c.DefaultProfile }, "default"},
		"slack.bot_token":             {"xoxb-env", func(c *Config) any { return c.Slack.BotToken }, "xoxb-env"},
		"slack.bot_token_file":        {tokenFile, func(c *Config) any { return c.Slack.BotToken }, "xoxb-env"},
		"slack.app_token":             {"xapp-env", func(c *Config) any { return c.Slack.AppToken }, "xapp-env"},
		"slack.app_token_file":        {tokenFile, func(c *Config) any { return c.Slack.AppToken }, "xapp-env"},
		"slack.mode":                  {"http", func(c *Config) any { return c.Slack.Mode }, "http"},
		"slack.signing_secret":        {"sign-env", func(c *Config) any { return c.Slack.SigningSecret }, "sign-env"},
		"slack.signing_secret_file":   {tokenFile, func(c *Config) any { return c.Slack.SigningSecret }, "sign-env"},
		"slack.listen":                {"127.0.0.1:3000", func(c *Config) any { return c.Slack.Listen }, "127.0.0.1:3000"},
		"slack.api_url":               {"http://127.0.0.1:9/api/", func(c *Config) any { return c.Slack.APIURL }, "http://127.0.0.1:9/api/"},
		"slack.allowed_channels":      {"C1,C2", func(c *Config) any { return c.Slack.AllowedChannels }, []string{"C1", "C2"}},
		"slack.allow_all_channels":    {"true", func(c *Config) any { return c.Slack.AllowAllChannels }, true},
		"slack.allowed_users":         {"U1 U2", func(c *Config) any { return c.Slack.AllowedUsers }, []string{"U1", "U2"}},
		"slack.allowed_groups":        {"S1", func(c *Config) any { return c.Slack.AllowedGroups }, []string{"S1"}},
		"slack.approvers":             {"U3", func(c *Config) any { return c.Slack.Approvers }, []string{"U3"}},
		"slack.approver_groups":       {"S2", func(c *Config) any { return c.Slack.ApproverGroups }, []string{"S2"}},
		"slack.allow_dms":             {"true", func(c *Config) any { return c.Slack.AllowDMs }, true},
		"slack.show_thoughts":         {"true", func(c *Config) any { return c.Slack.ShowThoughts }, true},
		"slack.edit_interval":         {"3s", func(c *Config) any { return c.Slack.EditInterval }, 3 * time.Second},
		"slack.max_answer_messages":   {"4", func(c *Config) any { return c.Slack.MaxMessages }, 4},
		"slack.max_image_bytes":       {"4096", func(c *Config) any { return c.Slack.MaxImageBytes }, int64(4096)},
		"slack.max_file_bytes":        {"40960", func(c *Config) any { return c.Slack.MaxFileBytes }, 40960},
		"slack.max_text_bytes":        {"8192", func(c *Config) any { return c.Slack.MaxTextBytes }, int64(8192)},
		"pool.warm":                   {"2", func(c *Config) any { return c.Pool.Warm }, 2},
		"agent.warm":                  {"1", func(c *Config) any { return c.Profiles["default"].Warm }, 1},
		"agent.hosts":                 {"gpu=a100,zone=eu", func(c *Config) any { return c.Profiles["default"].Hosts }, []string{"gpu=a100", "zone=eu"}},
		"cluster.url":                 {"nats://10.0.0.5:4222", func(c *Config) any { return c.Cluster.URL }, "nats://10.0.0.5:4222"},
		"cluster.name":                {"broker-1", func(c *Config) any { return c.Cluster.Name }, "broker-1"},
		"cluster.user":                {"broker", func(c *Config) any { return c.Cluster.User }, "broker"},
		"cluster.password":            {"from-file", func(c *Config) any { return c.Cluster.Password }, "from-file"},
		"cluster.password_file":       {tokenFile, func(c *Config) any { return c.Cluster.Password }, "from-file"},
		"cluster.nkey_seed_file":      {"/etc/broker/nkey", func(c *Config) any { return c.Cluster.NKeySeedFile }, "/etc/broker/nkey"},
		"cluster.tls_ca":              {"/etc/broker/ca.pem", func(c *Config) any { return c.Cluster.TLSCA }, "/etc/broker/ca.pem"},
		"cluster.tls_cert":            {"/etc/broker/cert.pem", func(c *Config) any { return c.Cluster.TLSCert }, "/etc/broker/cert.pem"},
		"cluster.tls_key":             {"/etc/broker/key.pem", func(c *Config) any { return c.Cluster.TLSKey }, "/etc/broker/key.pem"},
		"cluster.host_timeout":        {"30s", func(c *Config) any { return c.Cluster.HostTimeout }, 30 * time.Second},
		"cluster.embedded":            {"true", func(c *Config) any { return c.Cluster.Embedded }, true},
		"cluster.listen":              {"0.0.0.0:4223", func(c *Config) any { return c.Cluster.Listen }, "0.0.0.0:4223"},
		"host.labels":                 {"gpu=a100", func(c *Config) any { return c.Host.Labels }, []string{"gpu=a100"}},
		"host.capacity":               {"5", func(c *Config) any { return c.Host.Capacity }, 5},
	}
	var missing []string
	for k := range defaults {
		if _, ok := cases[k]; !ok {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("keys with no environment test: %s", strings.Join(missing, ", "))
	}
	environ := []string{"PATH=/nonexistent:" + bin}
	for k, tc := range cases {
		environ = append(environ, fmt.Sprintf("BROKER_%s=%s", strings.ToUpper(strings.ReplaceAll(k, ".", "_")), tc.env))
	}
	c, err := Load("", environ)
	if err != nil {
		t.Fatal(err)
	}
	for k, tc := range cases {
		if got := tc.got(c); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s from the environment = %#v, want %#v", k, got, tc.want)
		}
	}
}

// The environment wins over the file.
func TestLoadConfig_EnvironmentOverridesTheFile(t *testing.T) {
	c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\n[turn]\ntimeout = \"10m\"\nqueue_size = 5", "BROKER_TURN_TIMEOUT=5m")
	if err != nil {
		t.Fatal(err)
	}
	if c.Turn.Timeout != 5*time.Minute || c.Turn.QueueSize != 5 {
		t.Fatalf("turn.timeout = %s (want 5m from the environment), queue_size = %d (want 5 from the file)", c.Turn.Timeout, c.Turn.QueueSize)
	}
}

// The Discord token can come from a file (for systemd credentials);
// discord.token, from the file or the environment, wins over it.
func TestLoadConfig_TokenFromAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("secret-from-file\n"), 0o600)
	c, err := Load("", []string{"BROKER_AGENT_COMMAND=" + fakeAgent, "BROKER_DISCORD_TOKEN_FILE=" + file})
	if err != nil || c.Discord.Token != "secret-from-file" {
		t.Fatalf("token = %q, %v", c.Discord.Token, err)
	}
	_, err = Load("", []string{"BROKER_AGENT_COMMAND=" + fakeAgent, "BROKER_DISCORD_TOKEN_FILE=/nonexistent/token"})
	if err == nil || !strings.Contains(err.Error(), "discord.token_file cannot be read") {
		t.Fatalf("missing token file: %v", err)
	}
}

// The example configuration names every key there is, with its default
// (cmd/broker's TestCheckConfig_TheExampleIsValid runs check-config on
// it).
func TestConfigExample_ListsEveryKeyWithItsDefault(t *testing.T) {
	v := viper.New()
	v.SetConfigFile("../config.example.toml")
	if err := v.ReadInConfig(); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for k := range defaults {
		if !v.IsSet(k) {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("config.example.toml lacks: %s", strings.Join(missing, ", "))
	}
	for k, d := range defaults {
		if k == "log.level" || k == "agent.command" || k == "agent.args" || k == "api.listen" {
			continue // the demo's choices
		}
		if got, want := fmt.Sprint(v.Get(k)), fmt.Sprint(d); got != want && !(got == "[]" && want == "[]") {
			t.Errorf("config.example.toml: %s = %s, but the default is %s", k, got, want)
		}
	}
}

// memory_max is a number of bytes, or one with a unit of powers of 1024;
// 0 is no limit; anything else, or a limit too small for an agent to
// start, is refused with the key named.
func TestLoadConfig_MemoryMaxReadsSizes(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int64
		err   string
	}{
		{`"4GiB"`, 4 << 30, ""},
		{`"4G"`, 4 << 30, ""},
		{`"1.5GiB"`, 3 << 29, ""},
		{`"512 MiB"`, 512 << 20, ""},
		{`268435456`, 256 << 20, ""},
		{`0`, 0, ""},
		{`"4GB"`, 0, `agent.memory_max = "4GB" is not a size like "4GiB"`},
		{`"lots"`, 0, `agent.memory_max = "lots" is not a size`},
		{`"-1GiB"`, 0, `agent.memory_max = "-1GiB" is not a size`},
		{`"1MiB"`, 0, "agent.memory_max = 1MiB is out of range [16 MiB, 1 PiB] (0: no limit)"},
	} {
		c, err := loadText(t, "[agent]\ncommand = \""+fakeAgent+"\"\nmemory_max = "+tc.value+"\n")
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("memory_max = %s: %v", tc.value, err)
		case tc.err == "" && c.Profiles["default"].MemoryMax != tc.want:
			t.Errorf("memory_max = %s reads %d, want %d", tc.value, c.Profiles["default"].MemoryMax, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("memory_max = %s: error %v, want %q", tc.value, err, tc.err)
		}
	}
	_, err := loadText(t, "[agents.a]\ncommand = \""+fakeAgent+"\"\npids_max = 3\n")
	if err == nil || !strings.Contains(err.Error(), "agents.a.pids_max = 3 is out of range [16, 4194304] (0: no limit)") {
		t.Errorf("pids_max = 3: %v", err)
	}
}
