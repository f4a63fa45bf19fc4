package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/chat/discord"

	"github.com/spf13/cast"
	"github.com/spf13/viper"
)

// Config is the broker's whole configuration.
type Config struct {
	Log struct {
		Level  string
		Format string
	}
	Chat struct {
		Platform string
	}
	Agent struct {
		Command      string
		Args         []string
		Env          map[string]string
		Cwd          string
		PerThreadDir bool
		AuthMethod   string
		StartTimeout time.Duration
		ExitGrace    time.Duration
		MaxLineBytes int
		// Bounds on what one agent may ask of the broker.
		MaxReadBytes, MaxWriteBytes, MaxRequests int
		// RestartAfterCancel: see adapter.Config.RestartAfterCancel.
		RestartAfterCancel bool
		// Sandbox is "bwrap" or "none"; SandboxRO and SandboxRW are more
		// paths shown to sandboxed agents; SandboxNetwork leaves them the
		// network.
		Sandbox              string
		SandboxRO, SandboxRW []string
		SandboxNetwork       bool
		// Launcher and LauncherStop: see pool.Sandbox.
		Launcher, LauncherStop []string
		// RunAs is the user agents run as (agent.run_as_user), or nil.
		RunAs *syscall.Credential
		// MCPServers are given to every agent session
		// ([[agent.mcp_servers]]); stdio commands are absolute.
		MCPServers []acp.MCPServer
	}
	Turn struct {
		Timeout           time.Duration
		LivenessInterval  time.Duration
		CancelGrace       time.Duration
		QueueSize         int
		UpdateQueue       int
		PermissionMode    string
		PermissionTimeout time.Duration
		ToolTimeout       time.Duration
	}
	Pool struct {
		MaxSessions int
		IdleTimeout time.Duration
		SlotWait    time.Duration
	}
	State struct {
		Dir       string
		Retention time.Duration
	}
	Watchdog struct {
		Interval time.Duration
	}
	Discord  DiscordConfig
	Shutdown struct {
		Grace time.Duration
	}
	HTTP struct {
		Listen string
	}
	// values holds every key's value as read, for reload diffs.
	values map[string]string
}

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
	MaxImageBytes    int64
	MaxTextBytes     int64
}

// MaxTurnTimeout is the largest turn.timeout accepted.
const MaxTurnTimeout = 6 * time.Hour

// defaults lists every key with its default; a key not listed here is
// unknown and refused, except [[agent.mcp_servers]] (see fileOnlyKey).
var defaults = map[string]any{
	"log.level":  "info",
	"log.format": "auto",

	"chat.platform": "console",

	"agent.command":              "",
	"agent.args":                 []string{},
	"agent.env":                  []string{},
	"agent.cwd":                  "./work",
	"agent.per_thread_dir":       true,
	"agent.auth_method":          "",
	"agent.start_timeout":        "60s",
	"agent.exit_grace":           "2s",
	"agent.max_line_bytes":       32 << 20,
	"agent.max_read_bytes":       8 << 20,
	"agent.max_write_bytes":      16 << 20,
	"agent.max_requests":         64,
	"agent.restart_after_cancel": false,
	"agent.sandbox":              "bwrap",
	"agent.sandbox_ro":           []string{},
	"agent.sandbox_rw":           []string{},
	"agent.sandbox_network":      true,
	"agent.launcher":             []string{},
	"agent.launcher_stop":        []string{},
	"agent.run_as_user":          "",

	"turn.timeout":            "30m",
	"turn.liveness_interval":  "30s",
	"turn.cancel_grace":       "10s",
	"turn.queue_size":         8,
	"turn.update_queue":       1024,
	"turn.permission_mode":    "ask",
	"turn.permission_timeout": "5m",
	"turn.tool_timeout":       "10m",

	"pool.max_sessions": 8,
	"pool.idle_timeout": "30m",
	"pool.slot_wait":    "10m",

	"state.dir":       "./state",
	"state.retention": "168h",

	"watchdog.interval": "15s",

	"discord.token":               "",
	"discord.token_file":          "",
	"discord.api_url":             "https://discord.com/api/v9/",
	"discord.allowed_channels":    []string{},
	"discord.allow_all_channels":  false,
	"discord.allowed_users":       []string{},
	"discord.allowed_roles":       []string{},
	"discord.approvers":           []string{},
	"discord.approver_roles":      []string{},
	"discord.allowed_bots":        []string{},
	"discord.show_thoughts":       false,
	"discord.edit_interval":       "1250ms",
	"discord.max_answer_messages": 6,
	"discord.max_image_bytes":     8 << 20,
	"discord.max_text_bytes":      256 << 10,

	"shutdown.grace": "15s",

	"http.listen": "127.0.0.1:9464",
}

// LoadConfig reads the TOML file (if path is set), applies BROKER_*
// environment overrides (BROKER_TURN_TIMEOUT=5m overrides turn.timeout) and
// validates everything. Errors name the offending key.
func LoadConfig(path string, environ []string) (*Config, error) {
	v := viper.New()
	v.SetConfigType("toml")
	for k, d := range defaults {
		v.SetDefault(k, d)
	}
	var text []byte
	if path != "" {
		var err error
		if text, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := v.ReadConfig(bytes.NewReader(text)); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	env := map[string]string{}
	for _, kv := range environ {
		if k, val, ok := strings.Cut(kv, "="); ok {
			env[k] = val
		}
	}
	for k := range defaults {
		if val, ok := env["BROKER_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))]; ok {
			v.Set(k, val)
		}
	}
	var unknown []string
	for _, k := range v.AllKeys() {
		if _, ok := defaults[k]; !ok && !fileOnlyKey(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("config: unknown key(s): %s", strings.Join(unknown, ", "))
	}
	r := reader{v: v, vals: map[string]string{}}
	c := &Config{}
	c.Log.Level = r.oneOf("log.level", "trace", "debug", "info", "warn", "error")
	c.Log.Format = r.oneOf("log.format", "auto", "console", "json")
	c.Chat.Platform = r.oneOf("chat.platform", "console", "discord")

	c.Agent.Command = r.str("agent.command")
	c.Agent.Args = r.strs("agent.args")
	c.Agent.Env = r.envList("agent.env")
	c.Agent.Cwd = r.str("agent.cwd")
	c.Agent.PerThreadDir = r.boolean("agent.per_thread_dir")
	c.Agent.AuthMethod = r.str("agent.auth_method")
	c.Agent.StartTimeout = r.dur("agent.start_timeout", time.Second, time.Hour)
	c.Agent.ExitGrace = r.dur("agent.exit_grace", 10*time.Millisecond, time.Minute)
	c.Agent.MaxLineBytes = r.integer("agent.max_line_bytes", 32<<20, 1<<30)
	c.Agent.MaxReadBytes = r.integer("agent.max_read_bytes", 1<<10, 1<<30)
	c.Agent.MaxWriteBytes = r.integer("agent.max_write_bytes", 1<<10, 1<<30)
	c.Agent.MaxRequests = r.integer("agent.max_requests", 1, 10000)
	c.Agent.RestartAfterCancel = r.boolean("agent.restart_after_cancel")
	c.Agent.Sandbox = r.oneOf("agent.sandbox", "bwrap", "none", "launcher")
	if name := r.str("agent.run_as_user"); name != "" {
		if cred, err := lookupUser(name); err != nil {
			r.fail("agent.run_as_user", "= %q: %v", name, err)
		} else if os.Getuid() != 0 {
			r.fail("agent.run_as_user", "= %q needs the broker to run as root (it runs as uid %d)", name, os.Getuid())
		} else {
			c.Agent.RunAs = cred
		}
	}
	c.Agent.Launcher = r.strs("agent.launcher")
	c.Agent.LauncherStop = r.strs("agent.launcher_stop")
	if c.Agent.Sandbox == "launcher" {
		if len(c.Agent.Launcher) == 0 {
			r.fail("agent.launcher", "is required with agent.sandbox = \"launcher\": the command agents are started through, e.g. [\"docker\", \"run\", \"--rm\", \"-i\", …]")
		} else if resolved, err := resolveCommand(c.Agent.Launcher[0], env["PATH"]); err != nil {
			r.fail("agent.launcher", "%v", err)
		} else {
			c.Agent.Launcher[0] = resolved
		}
	}
	c.Agent.SandboxRO = r.absPaths("agent.sandbox_ro")
	c.Agent.SandboxRW = r.absPaths("agent.sandbox_rw")
	c.Agent.SandboxNetwork = r.boolean("agent.sandbox_network")
	c.Agent.MCPServers = r.readMCPServers(text, env)

	c.Turn.Timeout = r.dur("turn.timeout", time.Second, MaxTurnTimeout)
	c.Turn.LivenessInterval = r.dur("turn.liveness_interval", 10*time.Millisecond, time.Hour)
	c.Turn.CancelGrace = r.dur("turn.cancel_grace", 10*time.Millisecond, 10*time.Minute)
	c.Turn.QueueSize = r.integer("turn.queue_size", 1, 1000)
	c.Turn.UpdateQueue = r.integer("turn.update_queue", 16, 1<<20)
	c.Turn.PermissionMode = r.oneOf("turn.permission_mode", "ask", "allow", "deny")
	c.Turn.PermissionTimeout = r.dur("turn.permission_timeout", time.Second, 24*time.Hour)

	c.Pool.MaxSessions = r.integer("pool.max_sessions", 1, 10000)
	c.Pool.IdleTimeout = r.dur("pool.idle_timeout", 0, 30*24*time.Hour)
	c.Pool.SlotWait = r.dur("pool.slot_wait", time.Second, 24*time.Hour)

	c.Turn.ToolTimeout = r.dur("turn.tool_timeout", 0, MaxTurnTimeout)
	if c.Turn.ToolTimeout > 0 && c.Turn.ToolTimeout < time.Second {
		r.fail("turn.tool_timeout", "= %s is too short: use 0s to disable, or at least 1s", c.Turn.ToolTimeout)
	}
	c.State.Dir = r.str("state.dir")
	c.State.Retention = r.dur("state.retention", time.Hour, 365*24*time.Hour)
	c.Watchdog.Interval = r.dur("watchdog.interval", 100*time.Millisecond, 10*time.Minute)

	d := &c.Discord
	d.Token = r.str("discord.token")
	if file := r.str("discord.token_file"); file != "" && d.Token == "" {
		d.TokenFile = file
		tok, err := readSecretFile(file)
		if err != nil {
			r.fail("discord.token_file", "cannot be read: %v", err)
		}
		d.Token = tok
	}
	d.APIURL = r.str("discord.api_url")
	if u, err := url.Parse(d.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail("discord.api_url", "= %q is not an http(s) URL like %s", d.APIURL, discord.DefaultAPIURL)
	}
	d.AllowedChannels = r.strs("discord.allowed_channels")
	d.AllowAllChannels = r.boolean("discord.allow_all_channels")
	d.AllowedUsers = r.strs("discord.allowed_users")
	d.AllowedRoles = r.strs("discord.allowed_roles")
	d.Approvers = r.strs("discord.approvers")
	d.ApproverRoles = r.strs("discord.approver_roles")
	d.AllowedBots = r.strs("discord.allowed_bots")
	d.ShowThoughts = r.boolean("discord.show_thoughts")
	d.EditInterval = r.dur("discord.edit_interval", 200*time.Millisecond, time.Minute)
	d.MaxMessages = r.integer("discord.max_answer_messages", 1, 50)
	d.MaxImageBytes = int64(r.integer("discord.max_image_bytes", 1, 25<<20))
	d.MaxTextBytes = int64(r.integer("discord.max_text_bytes", 1, 4<<20))

	c.Shutdown.Grace = r.dur("shutdown.grace", time.Second, 10*time.Minute)
	c.HTTP.Listen = r.str("http.listen")
	if c.HTTP.Listen != "" {
		if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
			r.fail("http.listen", "= %q is not a host:port address (e.g. 127.0.0.1:9464; empty to serve nothing)", c.HTTP.Listen)
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			r.fail("http.listen", "= %q has no port number", c.HTTP.Listen)
		}
	}

	if c.Agent.Command == "" {
		r.fail("agent.command", "is required: the agent program to run")
	} else if resolved, err := resolveCommand(c.Agent.Command, env["PATH"]); err != nil {
		r.fail("agent.command", "%v", err)
	} else {
		c.Agent.Command = resolved
	}
	if c.Chat.Platform == "discord" {
		if d.Token == "" {
			r.fail("discord.token", "is required when chat.platform = \"discord\" (or set BROKER_DISCORD_TOKEN)")
		}
		if len(d.AllowedChannels) == 0 && !d.AllowAllChannels {
			r.fail("discord.allowed_channels", "is empty: list the channel ids the bot may answer in, or set discord.allow_all_channels = true")
		}
	}
	if len(r.errs) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(r.errs...))
	}
	c.values = r.vals
	return c, nil
}

// lookupUser finds a user by name or number, with its primary group.
func lookupUser(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, fmt.Errorf("no such user")
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has ids %s:%s", name, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
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

// resolveCommand makes the agent program an absolute path: a name with a
// slash is taken relative to the broker's working directory (not the
// agent's), a bare name is looked up on path. It must be an executable
// file.
func resolveCommand(cmd, path string) (string, error) {
	var candidates []string
	if strings.ContainsRune(cmd, '/') {
		abs, err := filepath.Abs(cmd)
		if err != nil {
			return "", err
		}
		candidates = []string{abs}
	} else {
		for _, dir := range filepath.SplitList(path) {
			if dir == "" {
				dir = "."
			}
			if abs, err := filepath.Abs(filepath.Join(dir, cmd)); err == nil {
				candidates = append(candidates, abs)
			}
		}
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	if strings.ContainsRune(cmd, '/') {
		return "", fmt.Errorf("= %q: %s is not an executable file", cmd, candidates[0])
	}
	return "", fmt.Errorf("= %q is not found on PATH", cmd)
}

// reader reads typed values, records them, and collects one error per bad
// key.
type reader struct {
	v    *viper.Viper
	errs []error
	vals map[string]string
}

func (r *reader) record(key string, v any) { r.vals[key] = fmt.Sprint(v) }

func (r *reader) fail(key, format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf("%s %s", key, fmt.Sprintf(format, args...)))
}

func (r *reader) str(key string) string {
	s, err := cast.ToStringE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be a string: %v", err)
	}
	r.record(key, s)
	return s
}

// absPaths reads a list of absolute paths.
func (r *reader) absPaths(key string) []string {
	paths := r.strs(key)
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			r.fail(key, "has %q, which is not an absolute path", p)
		}
	}
	return paths
}

func (r *reader) strs(key string) []string {
	raw := r.v.Get(key)
	if s, ok := raw.(string); ok { // from the environment: comma or space separated
		out := strings.FieldsFunc(s, func(c rune) bool { return c == ',' || c == ' ' })
		r.record(key, out)
		return out
	}
	out, err := cast.ToStringSliceE(raw)
	if err != nil {
		r.fail(key, "must be a list of strings: %v", err)
	}
	r.record(key, out)
	return out
}

func (r *reader) boolean(key string) bool {
	b, err := cast.ToBoolE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be true or false: %v", err)
	}
	r.record(key, b)
	return b
}

func (r *reader) integer(key string, lo, hi int) int {
	n, err := cast.ToIntE(r.v.Get(key))
	if err != nil {
		r.fail(key, "must be a whole number: %v", err)
		return 0
	}
	if n < lo || n > hi {
		r.fail(key, "= %d is out of range [%d, %d]", n, lo, hi)
	}
	r.record(key, n)
	return n
}

func (r *reader) dur(key string, lo, hi time.Duration) time.Duration {
	s := r.str(key)
	d, err := time.ParseDuration(s)
	if err != nil {
		r.fail(key, "= %q is not a duration like \"90s\" or \"5m\"", s)
		return 0
	}
	if d < lo || d > hi {
		r.fail(key, "= %s is out of range [%s, %s]", d, lo, hi)
	}
	r.record(key, d)
	return d
}

func (r *reader) oneOf(key string, allowed ...string) string {
	s := r.str(key)
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	r.fail(key, "= %q must be one of %s", s, strings.Join(allowed, ", "))
	return s
}

// envList reads "NAME=value" entries (the list form keeps names' case).
func (r *reader) envList(key string) map[string]string {
	out := map[string]string{}
	for _, kv := range r.strs(key) {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			r.fail(key, "entry %q must look like NAME=value", kv)
			continue
		}
		out[name] = val
	}
	return out
}
