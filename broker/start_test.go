package broker

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"acpbroker/chat/discord"
	"acpbroker/chat/slack"
	"acpbroker/config"
	"acpbroker/pool"
)

// startCheck says, for a key only a start applies, a value other than its
// default (as TOML) and where the started broker shows it: in the part
// that consumes it (the pool, its connections, the Discord client, the
// store, the HTTP server, the /agents list), not in the configuration
// read. run names the configuration it is set in: "launcher" (agents
// started through a launcher, the token from a file) or "token" (the
// token itself, and the bubblewrap sandbox when there is one), for keys
// that exclude one another.
type startCheck struct {
	run   string
	value string
	want  any
	got   func(b *Broker) any
}

// startElsewhere are the keys consumed outside the broker's start, or
// whose effect shows only later, each with the test that shows it.
var startElsewhere = map[string]string{
	// Warm agents and agent hosts: each key shown consumed where its
	// effect is seen (faults: through the real binaries).
	"pool.warm":              "TestWarm_TheKeysKeepThatManyReady",
	"warm":                   "TestWarm_TheKeysKeepThatManyReady",
	"cluster.url":            "TestCluster_ANATSRestartMidTurnLosesNothing",
	"cluster.user":           "TestCluster_AHostWithoutTheCredentialsIsRefused",
	"cluster.password":       "TestCluster_AHostWithoutTheCredentialsIsRefused",
	"cluster.embedded":       "TestCluster_ThreadsSpreadOverTheHostsAndEachIsAnswered",
	"cluster.listen":         "TestCluster_ThreadsSpreadOverTheHostsAndEachIsAnswered",
	"cluster.host_timeout":   "TestCluster_HostTimeoutIsConsumed",
	"cluster.name":           "TestCluster_LabelsCapacityAndProfileHostsPlaceAgents",
	"host.labels":            "TestCluster_LabelsCapacityAndProfileHostsPlaceAgents",
	"host.capacity":          "TestCluster_LabelsCapacityAndProfileHostsPlaceAgents",
	"hosts":                  "TestCluster_LabelsCapacityAndProfileHostsPlaceAgents",
	"shared_repo":            "TestCluster_AWorktreeThreadContinuesFromItsLastCommitOnAnotherHost",
	"cluster.password_file":  "TestCluster_CredentialKeysAreConsumed",
	"cluster.nkey_seed_file": "TestCluster_CredentialKeysAreConsumed",
	"cluster.tls_ca":         "TestCluster_CredentialKeysAreConsumed",
	"cluster.tls_cert":       "TestCluster_CredentialKeysAreConsumed",
	"cluster.tls_key":        "TestCluster_CredentialKeysAreConsumed",
	"log.format":             "TestRun_TheLogFormatIsAsConfigured",            // the logger is made before open
	"delete_branches":        "TestProfiles_WorktreesPastRetentionAreRemoved", // faults: acts at the sweep
	// The web front end's keys are read where the broker starts serving
	// it; these show each consumed, through the fake Discord.
	"web.listen":          "TestWeb_SlashWebSignsInAndTheThreadPageShowsTheWholeAnswer",
	"web.public_url":      "TestWeb_PublicURLSessionTTLAndTheOperatorsView",
	"web.session_ttl":     "TestWeb_PublicURLSessionTTLAndTheOperatorsView",
	"web.trusted_proxies": "TestWeb_TrustedProxiesLimitSignInsByTheForwardedClient",
}

// Every key the table marks as needing a restart is consumed at start:
// a broker opened from a file in which each has a value other than its
// default has that value in the part that uses it. A key without a check
// here fails the test, and so does a check of a key a reload changes
// (those are TestReload_EveryLiveKeyTakesEffect's).
func TestStart_EveryKeyReachesWhatConsumesIt(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("t0ken-from-file\n"), 0o600)
	appTokenFile, signingFile := filepath.Join(dir, "app-token"), filepath.Join(dir, "signing")
	os.WriteFile(appTokenFile, []byte("xapp-from-file\n"), 0o600)
	os.WriteFile(signingFile, []byte("signing-from-file\n"), 0o600)
	repo, err := filepath.EvalSymlinks(gitRepo(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-C", repo, "checkout", "-q", "-b", "other"},
		{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "on other"},
		{"-C", repo, "checkout", "-q", "main"},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	otherHead, err := exec.Command("git", "-C", repo, "rev-parse", "other").Output()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// agent.run_as_user is set below: the repository is its agents'
		// user's, as an operator must make it.
		if out, err := exec.Command("chown", "-R", "nobody", repo).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
		for d := filepath.Dir(repo); strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiListen := ln.Addr().String()
	ln.Close()
	slackListen := "127.0.0.1:1" // not listened on: Slack's Run is not called
	env, _ := exec.LookPath("env")
	truth, _ := exec.LookPath("true")
	conn := func(b *Broker) pool.Config { return b.pool.Config() }
	profile := func(b *Broker) *pool.Profile { return b.pool.Profile("") }
	// worktree makes thread t1's workspace the way an agent's start does.
	worktree := func(b *Broker) string {
		d, err := profile(b).Workspace(context.Background(), "t1")
		if err != nil {
			return "error: " + err.Error()
		}
		return d
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }

	checks := map[string]startCheck{
		"chat.platform":               {"", `["discord", "slack"]`, []string{"discord", "slack"}, func(b *Broker) any { return platformNames(b) }},
		"agent.exit_grace":            {"", `"5s"`, "5s", func(b *Broker) any { return conn(b).ExitGrace }},
		"agent.max_line_bytes":        {"", `33554433`, 33554433, func(b *Broker) any { return conn(b).Conn.MaxLineBytes }},
		"agent.max_read_bytes":        {"", `1048578`, 1048578, func(b *Broker) any { return conn(b).Host.MaxReadBytes }},
		"agent.max_write_bytes":       {"", `1048579`, 1048579, func(b *Broker) any { return conn(b).Host.MaxWriteBytes }},
		"agent.max_requests":          {"", `7`, 7, func(b *Broker) any { return conn(b).Conn.MaxAgentRequests }},
		"agent.max_terminals":         {"", `3`, 3, func(b *Broker) any { return conn(b).Host.MaxTerminals }},
		"agent.max_terminal_bytes":    {"", `65537`, 65537, func(b *Broker) any { return conn(b).Host.MaxTerminalBytes }},
		"agent.sandbox":               {"launcher", `"launcher"`, "", func(b *Broker) any { return conn(b).Sandbox.Bwrap }},
		"agent.launcher":              {"launcher", `["env", "LAUNCHED=1"]`, []string{env, "LAUNCHED=1"}, func(b *Broker) any { return conn(b).Sandbox.Launcher }},
		"agent.launcher_stop":         {"launcher", q(truth), []string{truth}, func(b *Broker) any { return conn(b).Sandbox.LauncherStop }},
		"turn.update_queue":           {"", `77`, 77, func(b *Broker) any { return conn(b).Conn.UpdateQueue }},
		"pool.max_sessions":           {"", `3`, 3, func(b *Broker) any { return conn(b).MaxSessions }},
		"pool.idle_timeout":           {"", `"7m"`, "7m0s", func(b *Broker) any { return conn(b).IdleTimeout }},
		"state.dir":                   {"", q(filepath.Join(dir, "state")), filepath.Join(dir, "state"), func(b *Broker) any { return b.store.Options().Dir }},
		"state.retention":             {"", `"48h"`, "48h0m0s", func(b *Broker) any { return b.store.Options().Retention }},
		"http.listen":                 {"", q(listen), listen, func(b *Broker) any { return b.http.Addr() }},
		"api.listen":                  {"", q(apiListen), apiListen, func(b *Broker) any { return b.APIAddr() }},
		"api.max_connections":         {"", `77`, 77, func(b *Broker) any { return b.api.MaxConnections() }},
		"discord.token":               {"token", `"t0ken-itself"`, "t0ken-itself", func(b *Broker) any { return discordOf(b).Config().Token }},
		"discord.token_file":          {"launcher", q(tokenFile), "t0ken-from-file", func(b *Broker) any { return discordOf(b).Config().Token }},
		"discord.api_url":             {"", `"http://127.0.0.1:1/api/v9/"`, "http://127.0.0.1:1/api/v9/", func(b *Broker) any { return discordOf(b).Config().APIURL }},
		"discord.edit_interval":       {"", `"2s"`, "2s", func(b *Broker) any { return discordOf(b).Config().EditInterval }},
		"discord.max_answer_messages": {"", `4`, 4, func(b *Broker) any { return discordOf(b).Config().MaxMessages }},
		"discord.max_image_bytes":     {"", `1048580`, 1048580, func(b *Broker) any { return discordOf(b).Config().MaxImageBytes }},
		"discord.max_file_bytes":      {"", `1048581`, 1048581, func(b *Broker) any { return discordOf(b).Config().MaxFileBytes }},
		"discord.max_text_bytes":      {"", `1048582`, 1048582, func(b *Broker) any { return discordOf(b).Config().MaxTextBytes }},
		"slack.bot_token":             {"token", `"xoxb-itself"`, "xoxb-itself", func(b *Broker) any { return slackOf(b).Config().BotToken }},
		"slack.bot_token_file":        {"launcher", q(tokenFile), "t0ken-from-file", func(b *Broker) any { return slackOf(b).Config().BotToken }},
		"slack.app_token":             {"token", `"xapp-itself"`, "xapp-itself", func(b *Broker) any { return slackOf(b).Config().AppToken }},
		"slack.app_token_file":        {"launcher", q(appTokenFile), "xapp-from-file", func(b *Broker) any { return slackOf(b).Config().AppToken }},
		"slack.mode":                  {"", `"http"`, "http", func(b *Broker) any { return slackOf(b).Config().Mode }},
		"slack.signing_secret":        {"token", `"signing-itself"`, "signing-itself", func(b *Broker) any { return slackOf(b).Config().SigningSecret }},
		"slack.signing_secret_file":   {"launcher", q(signingFile), "signing-from-file", func(b *Broker) any { return slackOf(b).Config().SigningSecret }},
		"slack.listen":                {"", q(slackListen), slackListen, func(b *Broker) any { return slackOf(b).Config().Listen }},
		"slack.api_url":               {"", `"http://127.0.0.1:1/api/"`, "http://127.0.0.1:1/api/", func(b *Broker) any { return slackOf(b).Config().APIURL }},
		"slack.edit_interval":         {"", `"3s"`, "3s", func(b *Broker) any { return slackOf(b).Config().EditInterval }},
		"slack.max_answer_messages":   {"", `5`, 5, func(b *Broker) any { return slackOf(b).Config().MaxMessages }},
		"slack.max_image_bytes":       {"", `1048583`, 1048583, func(b *Broker) any { return slackOf(b).Config().MaxImageBytes }},
		"slack.max_file_bytes":        {"", `1048584`, 1048584, func(b *Broker) any { return slackOf(b).Config().MaxFileBytes }},
		"slack.max_text_bytes":        {"", `1048585`, 1048585, func(b *Broker) any { return slackOf(b).Config().MaxTextBytes }},

		// The keys of the one profile of [agent].
		"command":        {"", q(fakeAgent), fakeAgent, func(b *Broker) any { return profile(b).Command }},
		"args":           {"", `["--quiet"]`, []string{"--quiet"}, func(b *Broker) any { return profile(b).Args }},
		"env":            {"", `["WHO=started"]`, true, func(b *Broker) any { return slices.Contains(profile(b).Env, "WHO=started") }},
		"description":    {"", `"the one agent"`, "the one agent", func(b *Broker) any { return b.agentList()[0].Description }},
		"cwd":            {"", q(filepath.Join(dir, "agents")), filepath.Join(dir, "agents"), func(b *Broker) any { return profile(b).WorkDir }},
		"per_thread_dir": {"", `false`, false, func(b *Broker) any { return profile(b).PerThreadDir }},
		"workspace":      {"launcher", `"worktree"`, true, func(b *Broker) any { return profile(b).Workspace != nil }},
		"repo": {"launcher", q(repo), "gitdir: " + filepath.Join(repo, ".git", "worktrees"), func(b *Broker) any {
			link, _ := os.ReadFile(filepath.Join(worktree(b), ".git"))
			return filepath.Dir(strings.TrimSpace(string(link)))
		}},
		"base": {"launcher", `"other"`, strings.TrimSpace(string(otherHead)), func(b *Broker) any {
			head, _ := exec.Command("git", "-c", "safe.directory=*", "-C", worktree(b), "rev-parse", "HEAD").Output()
			return strings.TrimSpace(string(head))
		}},
		"auth_method":          {"", `"api-key"`, "api-key", func(b *Broker) any { return profile(b).AuthMethod }},
		"start_timeout":        {"", `"9s"`, "9s", func(b *Broker) any { return profile(b).StartTimeout }},
		"sandbox_ro":           {"", "[" + q(filepath.Join(dir, "ro")) + "]", []string{filepath.Join(dir, "ro")}, func(b *Broker) any { return profile(b).SandboxRO }},
		"sandbox_rw":           {"", "[" + q(filepath.Join(dir, "rw")) + "]", true, func(b *Broker) any { return slices.Contains(profile(b).SandboxRW, filepath.Join(dir, "rw")) }},
		"max_sessions":         {"", `2`, 2, func(b *Broker) any { return profile(b).MaxSessions }},
		"memory_max":           {"", `"96MiB"`, 96 << 20, func(b *Broker) any { return profile(b).MemoryMax }},
		"pids_max":             {"", `77`, 77, func(b *Broker) any { return profile(b).PidsMax }},
		"restart_after_cancel": {"", `true`, true, func(b *Broker) any { return profile(b).RestartAfterCancel }},
		"busy":                 {"", `"interrupt"`, "interrupt", func(b *Broker) any { return profile(b).Busy }},
		"fork_max_size":        {"", `"3MiB"`, int64(3 << 20), func(b *Broker) any { return profile(b).ForkMaxBytes }},
		"network":              {"", `"none"`, "none", func(b *Broker) any { return profile(b).Network }},
		"allow_hosts": {"", `["models.example.com:8443"]`, []bool{true, false}, func(b *Broker) any {
			a := profile(b).Allow
			return []bool{a.Permits("models.example.com", 8443), a.Permits("api.anthropic.com", 443)}
		}},
	}
	elsewhere := maps.Clone(startElsewhere)
	if _, err := exec.LookPath("bwrap"); err == nil {
		checks["agent.sandbox_network"] = startCheck{"token", `false`, true, func(b *Broker) any { return conn(b).Sandbox.NoNetwork }}
	} else {
		elsewhere["agent.sandbox_network"] = "TestSandbox_NoNetworkCutsEvenLoopback" // faults; needs bubblewrap here
	}
	if os.Geteuid() == 0 {
		checks["agent.run_as_user"] = startCheck{"", `"nobody"`, uint32(65534), func(b *Broker) any { return conn(b).RunAs.Uid }}
	} else {
		elsewhere["agent.run_as_user"] = "TestPool_RunAsStartsAgentsAsAnotherUser" // pool; the broker must be root
	}

	tests := testFuncs(t, "faults", "pool", "cmd/broker", ".")
	for _, k := range config.Keys() {
		_, checked := checks[k.Name]
		test, shown := elsewhere[k.Name]
		switch {
		case k.Live && checked:
			t.Errorf("%s is checked here, but a reload changes it: TestReload_EveryLiveKeyTakesEffect checks it", k.Name)
		case !k.Live && !checked && !shown:
			t.Errorf("%s needs a restart, but nothing here checks that a start consumes it", k.Name)
		case shown && !tests[test]:
			t.Errorf("%s is said to be shown by %s, which does not exist", k.Name, test)
		}
	}
	for _, name := range config.ProfileKeys() {
		_, checked := checks[name]
		test, shown := elsewhere[name]
		if !checked && !shown {
			t.Errorf("profile key %s: nothing here checks that a start consumes it", name)
		} else if shown && !tests[test] {
			t.Errorf("%s is said to be shown by %s, which does not exist", name, test)
		}
	}

	for _, run := range []string{"launcher", "token"} {
		// Discord and Slack need a channel to serve; the rest is the
		// checks'.
		values := map[string]string{"discord.allow_all_channels": "true", "slack.allow_all_channels": "true"}
		for name, c := range checks {
			if c.run == "" || c.run == run {
				values[profileKeyPath(name)] = c.value
			}
		}
		if run == "token" {
			if _, ok := checks["agent.sandbox_network"]; ok {
				values["agent.sandbox"] = `"bwrap"`
			} else {
				values["agent.sandbox"] = `"none"`
			}
		}
		path := filepath.Join(dir, run+".toml")
		if err := os.WriteFile(path, []byte(tomlOf(values)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, []string{"PATH=" + os.Getenv("PATH")})
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		b, err := Open(cfg, Options{Environ: []string{"PATH=" + os.Getenv("PATH")}, Logger: testLog(t), Stdin: strings.NewReader(""), Stdout: io.Discard})
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		for _, name := range sortedKeys(checks) {
			c := checks[name]
			if c.run != "" && c.run != run {
				continue
			}
			if got := c.got(b); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("%s = %s: the started broker has %v, want %v", name, c.value, got, c.want)
			}
		}
		b.Stop(context.Background())
	}
}

// profileKeyPath is where a key of the table is written: a profile's in
// [agent], the others as they are named.
func profileKeyPath(name string) string {
	if strings.Contains(name, ".") {
		return name
	}
	return "agent." + name
}

// testFuncs are the names of the Test functions in the _test.go files of
// dirs (relative to the module's root; "." is this package).
func testFuncs(t *testing.T, dirs ...string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, d := range dirs {
		if d != "." {
			d = filepath.Join("..", d)
		}
		files, _ := filepath.Glob(filepath.Join(d, "*_test.go"))
		for _, f := range files {
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range parsed.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
					names[fn.Name.Name] = true
				}
			}
		}
	}
	return names
}

// platformNames are the platforms b serves, in order.
func platformNames(b *Broker) []string {
	var out []string
	for _, p := range b.chats {
		out = append(out, p.name)
	}
	return out
}

// discordOf is b's Discord client.
func discordOf(b *Broker) *discord.Client { return b.Platform("discord").(*discord.Client) }

// slackOf is b's Slack client.
func slackOf(b *Broker) *slack.Client { return b.Platform("slack").(*slack.Client) }
