// Package config is the broker's configuration: its typed form, the
// table of its keys (defaults, bounds, what a reload changes, the README's
// lines), reading it from a TOML file (parsed once) and BROKER_*
// environment variables, and the checks of types and ranges that name the
// key at fault and where it was written. It asks nothing of the machine:
// the programs, the user and the paths it names are found and checked
// where the broker is wired.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/policy"
	"acpbroker/workspace"

	"github.com/spf13/viper"
)

// Config is the broker's whole configuration. Load makes one; a
// configuration made otherwise lacks the record of what was written
// where, which error messages and reload diffs go by.
type Config struct {
	// Path is the file the configuration was read from ("" if none).
	Path string
	Log  struct {
		Level  string
		Format string
	}
	Chat struct {
		// Platforms are the chat platforms served at once, by name
		// (chat.platform): "console" alone, or others (see Platforms).
		Platforms []string
	}
	// Agent is the [agent] section: the settings of every agent, and the
	// profile keys every profile starts from (the one profile, "default",
	// when there is no [agents.NAME]).
	Agent struct {
		Profile
		ExitGrace    time.Duration
		MaxLineBytes int
		// Bounds on what one agent may ask of the broker.
		MaxReadBytes, MaxWriteBytes, MaxRequests int
		MaxTerminals, MaxTerminalBytes           int
		// Sandbox is "bwrap", "none" or "launcher"; SandboxNetwork false
		// (deprecated) makes network "none" for every profile that sets
		// no network of its own.
		Sandbox        string
		SandboxNetwork bool
		// Launcher and LauncherStop: see pool.Sandbox.
		Launcher, LauncherStop []string
		// RunAsUser is agent.run_as_user as written, a name or a uid;
		// RunAs is that user, found where the broker is wired (nil
		// until then, and with none).
		RunAsUser string
		RunAs     *syscall.Credential
	}
	// Profiles are the agents a thread may get, by name; DefaultProfile
	// is the one a thread gets when nothing else says.
	Profiles       map[string]*Profile
	DefaultProfile string
	// Channels maps a channel id to the profile its new threads get
	// ([channels."ID"] agent = "NAME"); such a channel is allowed.
	Channels map[string]string
	Turn     struct {
		Timeout           time.Duration
		LivenessInterval  time.Duration
		CancelGrace       time.Duration
		QueueSize         int
		Busy              string
		UpdateQueue       int
		PermissionMode    string
		PermissionTimeout time.Duration
		ToolTimeout       time.Duration
	}
	Pool struct {
		MaxSessions int
		IdleTimeout time.Duration
		SlotWait    time.Duration
		// Warm is the warm agents of profiles that set none.
		Warm int
	}
	// Cluster joins agent hosts ([cluster]); Host is what `broker host`
	// offers ([host]).
	Cluster ClusterConfig
	Host    HostConfig
	State   struct {
		Dir       string
		Retention time.Duration
	}
	Watchdog struct {
		Interval time.Duration
	}
	Discord  DiscordConfig
	Slack    SlackConfig
	Shutdown struct {
		Grace time.Duration
	}
	HTTP struct {
		Listen string
	}
	// API is the HTTP API ([api], [[api.tokens]]); Schedules the
	// [[schedules]] tables, in the file's order.
	API       APIConfig
	Schedules []Schedule
	// Web is the web front end ([web]), off unless Listen is set.
	Web WebConfig
	// Warnings say what is valid but cannot be meant: check-config
	// prints them, the broker logs them at start and at a reload.
	Warnings []string
	// values holds every key's value as read, for reload diffs.
	values map[string]string
	// read is what read the configuration, to read its live keys again
	// onto a running one (see Live).
	read *reader
}

// Profile is one agent definition: [agent], or an [agents.NAME] section
// over it.
type Profile struct {
	Name        string
	Description string
	Command     string // absolute
	Args        []string
	Env         map[string]string
	Cwd         string
	// Workspace is "dir" (PerThreadDir: cwd/<thread>, else cwd) or
	// "worktree" (a git worktree of Repo per thread, from Base).
	PerThreadDir bool
	Workspace    string
	Repo, Base   string
	// SharedRepo is the URL or path of the repository every agent
	// host's clone of Repo shares: a worktree thread's branch is pushed
	// there after each turn and fetched from there on another host.
	SharedRepo         string
	DeleteBranches     bool
	AuthMethod         string
	StartTimeout       time.Duration
	MaxSessions        int
	RestartAfterCancel bool
	// Busy is "queue" or "interrupt", its threads' turn.busy ("": as
	// turn.busy says).
	Busy string
	// ForkMaxSize bounds the copy of a thread's directory for a fork
	// (0: no bound).
	ForkMaxSize int64
	// MemoryMax (bytes) and PidsMax bound each of its agents, in a
	// control group of its own (0: no limit).
	MemoryMax, PidsMax int64
	// MCPServers are given to every session of the profile's agents;
	// stdio commands are absolute.
	MCPServers []acp.MCPServer
	// Permissions decide its agents' permission requests before anyone
	// is asked ([[agents.NAME.permissions]]).
	Permissions []policy.Rule
	// SandboxRO and SandboxRW are more paths its sandboxed agents see.
	SandboxRO, SandboxRW []string
	// Network is what network its sandboxed agents have: "proxy" (a
	// namespace of their own, out only through the broker's proxy to
	// AllowHosts), "none" or "host".
	Network    string
	AllowHosts []string
	// Hosts are "key=value" selectors an agent host's labels must all
	// match to run its agents; Warm is how many of its agents are kept
	// started for new threads (pool.warm when it sets none).
	Hosts []string
	Warm  int
}

// Limited reports whether some profile limits its agents (memory_max,
// pids_max).
func (c *Config) Limited() bool {
	for _, p := range c.Profiles {
		if p.MemoryMax > 0 || p.PidsMax > 0 {
			return true
		}
	}
	return false
}

// DefaultProfileName names the one profile of a configuration without
// [agents.NAME] sections.
const DefaultProfileName = "default"

// DiscordConfig is the [discord] table.
type DiscordConfig struct {
	Token            string
	TokenFile        string // where Token was read from, if from a file
	APIURL           string
	AllowedChannels  []string
	AllowAllChannels bool
	AllowedUsers     []string
	AllowedRoles     []string
	Approvers        []string
	ApproverRoles    []string
	AllowedBots      []string
	ShowThoughts     bool
	EditInterval     time.Duration
	MaxMessages      int
	MaxFileBytes     int
	MaxImageBytes    int64
	MaxTextBytes     int64
}

// SlackConfig is the [slack] table.
type SlackConfig struct {
	// BotToken (xoxb-…) makes every Web API call; AppToken (xapp-…)
	// opens the Socket Mode connections; SigningSecret verifies what
	// Slack posts in http mode. Each *File is where its secret was read
	// from, if from a file.
	BotToken, BotTokenFile           string
	AppToken, AppTokenFile           string
	SigningSecret, SigningSecretFile string
	// Mode is "socket" or "http"; Listen is the http mode's address.
	Mode   string
	Listen string
	APIURL string
	// The access lists: channel ids (C…, G…), user ids (U…, W…) and
	// user group ids (S…).
	AllowedChannels  []string
	AllowAllChannels bool
	AllowedUsers     []string
	AllowedGroups    []string
	Approvers        []string
	ApproverGroups   []string
	AllowDMs         bool
	ShowThoughts     bool
	EditInterval     time.Duration
	MaxMessages      int
	MaxFileBytes     int
	MaxImageBytes    int64
	MaxTextBytes     int64
}

// MaxTurnTimeout is the largest turn.timeout accepted.
const MaxTurnTimeout = 6 * time.Hour

// profileName is what a profile may be called (viper gives section names
// in lower case).
var profileName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Load reads the TOML file (if path is set), applies BROKER_* environment
// overrides (BROKER_TURN_TIMEOUT=5m overrides turn.timeout) and validates
// everything. Errors name the offending key and where it was written: the
// file and line (and column, for a syntax error), or the variable.
func Load(path string, environ []string) (*Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	var text []byte
	doc := map[string]any{}
	if path != "" {
		var err error
		if text, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if doc, err = parse(path, text); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := v.MergeConfigMap(copyDoc(doc)); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok {
			env[k] = val
		}
	}
	fromEnv := map[string]string{}
	for k := range defaults {
		if val, ok := env[envName(k)]; ok {
			fromEnv[k] = envName(k) + "=" + val
			if secretKey(k) {
				fromEnv[k] = envName(k)
			}
			if k != defaultProfileKey {
				v.Set(k, val)
			}
		}
	}
	r := reader{v: v, vals: map[string]string{}, env: env, path: path, text: text, fromEnv: fromEnv}
	// A dotted profile name reads to viper as a profile and keys that do
	// not exist: said first, as what it is.
	agentsTable, _ := foldGet(doc, "agents").(map[string]any)
	for _, name := range sortedKeys(agentsTable) {
		if strings.Contains(name, ".") {
			r.fail(fmt.Sprintf("agents.%q", name), "is not a profile name: use up to 32 lower-case letters, digits, - and _")
		}
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(r.errs...))
	}
	if unknown := unknownKeys(v); len(unknown) > 0 {
		for i, k := range unknown {
			if line := keyLine(text, k); line > 0 {
				unknown[i] = fmt.Sprintf("%s (%s:%d)", k, path, line)
			}
		}
		return nil, fmt.Errorf("config: unknown key(s): %s", strings.Join(unknown, ", "))
	}
	c := &Config{Path: path}
	for _, k := range keys {
		k.read(&r, k.name, c)
	}
	r.caseClashes(doc, "")
	if _, ok := env["BROKER_AGENT_MCP_SERVERS"]; ok {
		r.fail("agent.mcp_servers", "cannot be set from the environment (BROKER_AGENT_MCP_SERVERS): write [[agent.mcp_servers]] tables in the configuration file")
	}
	agentTable, _ := foldGet(doc, "agent").(map[string]any)
	c.Agent.Profile = r.profile("agent", nil, agentTable, env)
	c.Profiles = map[string]*Profile{}
	for _, name := range profileSections(v) {
		section := "agents." + name
		if !profileName.MatchString(name) {
			r.fail(section, "is not a profile name: use up to 32 lower-case letters, digits, - and _")
			continue
		}
		if _, ok := v.Get(section).(map[string]any); !ok {
			r.fail(section, "must be a table: [agents.%s] with the keys of [agent]", name)
			continue
		}
		table, _ := foldGet(agentsTable, name).(map[string]any)
		p := r.profile(section, &c.Agent.Profile, table, env)
		p.Name = name
		c.Profiles[name] = &p
	}
	if len(c.Profiles) == 0 {
		p := c.Agent.Profile
		p.Name = DefaultProfileName
		c.Profiles[p.Name] = &p
	}
	_, inEnv := env[envName("agent.network")]
	networkWritten := func(p *Profile) bool {
		return inEnv || v.InConfig("agent.network") || v.IsSet("agents."+p.Name+".network")
	}
	warned := map[string]bool{}
	for _, name := range sortedKeys(c.Profiles) {
		p := c.Profiles[name]
		switch {
		case !c.Agent.SandboxNetwork && !networkWritten(p):
			p.Network = "none"
		case c.Agent.Sandbox != "bwrap" && networkWritten(p) && p.Network != "host":
			key := "agent.network"
			if v.IsSet("agents." + name + ".network") {
				key = "agents." + name + ".network"
			}
			if warned[key] {
				continue
			}
			warned[key] = true
			has := "the host's network, every port on its loopback included"
			if c.Agent.Sandbox == "launcher" {
				has = "the network their container or pod gives them"
			}
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s = %q applies only with agent.sandbox = \"bwrap\": with agent.sandbox = %q its agents have %s", key, p.Network, c.Agent.Sandbox, has))
		}
	}
	switch {
	case c.DefaultProfile == "" && len(c.Profiles) == 1:
		for name := range c.Profiles {
			c.DefaultProfile = name
		}
	case c.DefaultProfile == "":
		r.fail("agents.default", "is required with several profiles: one of %s", strings.Join(sortedKeys(c.Profiles), ", "))
	case c.Profiles[c.DefaultProfile] == nil:
		r.fail("agents.default", "= %q is not a profile: one of %s", c.DefaultProfile, strings.Join(sortedKeys(c.Profiles), ", "))
	}
	said := map[string]bool{}
	for _, name := range sortedKeys(c.Profiles) {
		p := c.Profiles[name]
		if p.MaxSessions <= c.Pool.MaxSessions {
			continue
		}
		key := "agent.max_sessions"
		if k := "agents." + name + ".max_sessions"; r.v.IsSet(k) {
			key = k
		}
		if !said[key] {
			said[key] = true
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s = %d is above pool.max_sessions = %d: the profile has at most %d live agents",
				key, p.MaxSessions, c.Pool.MaxSessions, c.Pool.MaxSessions))
		}
	}
	if c.Agent.Sandbox == "none" && c.Agent.RunAsUser == "" && os.Getuid() == 0 {
		c.Warnings = append(c.Warnings, `agent.sandbox = "none" with the broker running as root and no agent.run_as_user: agents run as root, unconfined; set agent.run_as_user to an unprivileged user, or use the sandbox`)
	}
	c.Channels = map[string]string{}
	channelsTable, _ := foldGet(doc, "channels").(map[string]any)
	for _, key := range sortedKeys(v.GetStringMap("channels")) {
		k := "channels." + key + ".agent"
		name := r.str(k)
		// viper gives the id in lower case; Slack's are in upper case.
		id := key
		for written := range channelsTable {
			if strings.EqualFold(written, key) {
				id = written
			}
		}
		switch {
		case name == "":
			r.fail(k, "is required: the profile new threads of channel %s get", id)
		case c.Profiles[name] == nil:
			r.fail(k, "= %q is not a profile: one of %s", name, strings.Join(sortedKeys(c.Profiles), ", "))
		default:
			c.Channels[id] = name
		}
	}

	d := &c.Discord
	if slices.Contains(c.Chat.Platforms, "discord") {
		if d.Token == "" {
			r.fail("discord.token", "is required when chat.platform has \"discord\" (or set BROKER_DISCORD_TOKEN)")
		}
		discordChannels := 0
		for id := range c.Channels {
			if !SlackID(id) {
				discordChannels++
			}
		}
		if len(d.AllowedChannels) == 0 && discordChannels == 0 && !d.AllowAllChannels {
			r.fail("discord.allowed_channels", "is empty: list the channel ids the bot may answer in, or set discord.allow_all_channels = true")
		}
	}
	r.clusterNeeds(c)
	r.readSchedules(doc, c)
	r.readTokens(doc, c)
	if len(c.Chat.Platforms) == 0 && c.API.Listen == "" {
		r.fail("chat.platform", "= \"none\" serves no chat: set api.listen for the API it serves alone")
	}
	if slices.Contains(c.Chat.Platforms, "slack") {
		r.slackNeeds(c)
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(r.errs...))
	}
	c.values, c.read = r.vals, &r
	c.Warnings = append(c.Warnings, exposureWarnings(c)...)
	return c, nil
}

// slackNeeds fails each key Slack needs and lacks, when chat.platform
// has it: a bot token, Socket Mode's app-level token or the http mode's
// signing secret and address, and somewhere to answer.
func (r *reader) slackNeeds(c *Config) {
	s := &c.Slack
	if s.BotToken == "" {
		r.fail("slack.bot_token", "is required when chat.platform has \"slack\": the Bot User OAuth Token, xoxb-… (or set BROKER_SLACK_BOT_TOKEN, or slack.bot_token_file)")
	}
	switch s.Mode {
	case "socket":
		if s.AppToken == "" {
			r.fail("slack.app_token", "is required with slack.mode = \"socket\": an app-level token with connections:write, xapp-… (or set BROKER_SLACK_APP_TOKEN, or slack.app_token_file)")
		}
	case "http":
		if s.SigningSecret == "" {
			r.fail("slack.signing_secret", "is required with slack.mode = \"http\": the app's Signing Secret (or set BROKER_SLACK_SIGNING_SECRET, or slack.signing_secret_file)")
		}
		switch {
		case s.Listen == "":
			r.fail("slack.listen", "is required with slack.mode = \"http\": the address Slack's requests come to, e.g. 127.0.0.1:3000 behind a TLS proxy")
		case s.Listen == c.HTTP.Listen && !strings.HasSuffix(s.Listen, ":0"):
			r.fail("slack.listen", "= %q is http.listen's address too: give Slack's requests an address of their own", s.Listen)
		}
	}
	slackChannels := 0
	for id := range c.Channels {
		if SlackID(id) {
			slackChannels++
		}
	}
	if len(s.AllowedChannels) == 0 && slackChannels == 0 && !s.AllowAllChannels && !s.AllowDMs {
		r.fail("slack.allowed_channels", "is empty: list the channel ids the app may answer in, or set slack.allow_all_channels = true, or slack.allow_dms = true for direct messages alone")
	}
}

// SlackID reports whether a channel id is Slack's (C…, G…, D…: upper
// case letters and digits, a letter first) rather than Discord's (digits).
func SlackID(id string) bool {
	if id == "" || id[0] < 'A' || id[0] > 'Z' {
		return false
	}
	for _, c := range id {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// profile reads a profile's keys in section: each set there, or else
// taken from base (the [agent] section's); with base nil, from the
// defaults. table is the section as go-toml read it.
func (r *reader) profile(section string, base *Profile, table map[string]any, env map[string]string) Profile {
	var p Profile
	if base != nil {
		p = *base
		p.Args = slices.Clone(base.Args)
		p.MCPServers = slices.Clone(base.MCPServers)
	}
	for _, k := range profileKeys {
		name := section + "." + k.name
		if base != nil && !r.v.IsSet(name) {
			continue
		}
		k.read(r, name, &p)
	}
	if servers, set := r.readMCPServers(section, table, env); set || base == nil {
		p.MCPServers = servers
	}
	if key := section + "." + permissionsField; r.v.IsSet(key) {
		rules, errs := policy.Parse(r.v.Get(key), key)
		r.errs = append(r.errs, errs...)
		p.Permissions = rules
		described := make([]string, len(rules))
		for i, rule := range rules {
			described[i] = fmt.Sprintf("%d: %s", i+1, rule)
		}
		r.vals[key] = "[" + strings.Join(described, "; ") + "]"
	}
	switch {
	case base == nil && p.Command == "":
		// [agent] need not name a command when each profile does.
		if len(profileSections(r.v)) == 0 {
			r.fail(section+".command", "is required: the agent program to run")
		}
	case base != nil && p.Command == "":
		r.fail(section+".command", "is required: the agent program to run (here, or agent.command for every profile)")
	}
	if p.Workspace == "worktree" && p.Repo == "" {
		r.fail(section+".repo", "is required with workspace = \"worktree\": the git repository threads get worktrees of")
	}
	if p.SharedRepo != "" && p.Workspace != "worktree" {
		r.fail(section+".shared_repo", "is only for workspace = \"worktree\": the repository a worktree thread's branch is shared through")
	}
	if p.SharedRepo != "" {
		if err := workspace.CheckSharedRepo(p.SharedRepo); err != nil {
			r.fail(section+".shared_repo", "%v", err) // not the value, which may hold a password
		}
	}
	return p
}

// caseClashes fails each pair of keys of one table in the file that
// differ only in case ([agents.Claude] and [agents.claude]): keys are not
// case-sensitive, so one would silently merge into the other. Arrays of
// tables, whose keys may be case-sensitive (an MCP server's env), are
// not looked into.
func (r *reader) caseClashes(table map[string]any, prefix string) {
	names := sortedKeys(table)
	seen := map[string]string{}
	for _, k := range names {
		folded := strings.ToLower(k)
		if first, ok := seen[folded]; ok {
			r.fail(prefix+first, "and %s%s differ only in case, and keys are not case-sensitive: they would be merged into one; keep one", prefix, k)
			continue
		}
		seen[folded] = k
		if sub, ok := table[k].(map[string]any); ok {
			r.caseClashes(sub, prefix+k+".")
		}
	}
}

// envName is the environment variable that overrides key k.
func envName(k string) string { return "BROKER_" + strings.ToUpper(strings.ReplaceAll(k, ".", "_")) }

// defaultProfileKey is read from the environment by its own read
// function: set in viper, a value under [agents] would hide every
// [agents.NAME] section from it.
const defaultProfileKey = "agents.default"

// profileSections are the names of the [agents.NAME] sections, sorted
// (agents.default is a key of [agents], not one).
func profileSections(v *viper.Viper) []string {
	var names []string
	for _, name := range sortedKeys(v.GetStringMap("agents")) {
		if name != "default" {
			names = append(names, name)
		}
	}
	return names
}

// unknownKeys lists the keys set that the broker does not know, sorted.
func unknownKeys(v *viper.Viper) []string {
	var unknown []string
	for _, k := range v.AllKeys() {
		if _, ok := defaults[k]; ok || fileOnlyKey(k) || arrayOfTables(k) {
			continue
		}
		if profile, field, ok := profileField(k); ok && profile != "" && knownProfileKey(field) {
			continue
		}
		if rest, ok := strings.CutPrefix(k, "agents."); ok && !strings.Contains(rest, ".") {
			continue // not a table: said where profiles are read
		}
		if rest, ok := strings.CutPrefix(k, "channels."); ok && strings.HasSuffix(rest, ".agent") && strings.Count(rest, ".") == 1 {
			continue
		}
		unknown = append(unknown, k)
	}
	sort.Strings(unknown)
	return unknown
}

func knownProfileKey(field string) bool {
	for _, k := range profileKeys {
		if k.name == field {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// maxSecretFile bounds a file holding a secret: a token is a line.
const maxSecretFile = 64 << 10

// readSecretFile reads a small regular file holding a secret, trimmed.
// Anything else (a pipe, a device, a huge file) is an error, never a hang.
func readSecretFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxSecretFile {
		return "", fmt.Errorf("%s is %d bytes, more than a token (%d at most)", path, st.Size(), maxSecretFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
