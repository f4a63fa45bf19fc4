package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"acpbroker/netproxy"
)

// key is one configuration key, defined once: its default, how it is
// read and bounded, whether SIGHUP changes it in a running broker, and
// its line in the README. Every key can be set from the environment as
// BROKER_ plus the key in upper case with dots as underscores.
type key struct {
	name string
	def  any
	// live: a reload applies it; any other change needs a restart.
	live bool
	// secret: its value is never logged, changed or not.
	secret bool
	// doc is the README's "meaning" cell; shown is the default as the
	// README gives it, when not the value itself.
	doc, shown string
	read       func(r *reader, k string, c *Config)
}

// profileKey is a key of an agent profile: set in [agent] it applies to
// every profile (and [agent] alone is the one profile, "default"); set
// in [agents.NAME] it applies to that one. A change reaches new agents of
// the profile at a reload; running agents keep what they started with.
type profileKey struct {
	name       string
	def        any
	secret     bool
	doc, shown string
	read       func(r *reader, k string, p *Profile)
}

// keys are the broker's keys outside agent profiles, in README order;
// the cluster's come last.
var keys = append([]key{
	{name: "log.level", def: "info", live: true, doc: "trace, debug, info, warn, error",
		read: func(r *reader, k string, c *Config) {
			c.Log.Level = r.oneOf(k, "trace", "debug", "info", "warn", "error")
		}},
	{name: "log.format", def: "auto", doc: "`console` (for people), `json`, or `auto`: console on a terminal, JSON otherwise",
		read: func(r *reader, k string, c *Config) { c.Log.Format = r.oneOf(k, "auto", "console", "json") }},
	{name: "chat.platform", def: "console", doc: "`console` (alone), `none` (the HTTP API alone; see HTTP API), or the chat platforms one broker serves: `discord`, `slack`, or a list of them (`[\"discord\", \"slack\"]`; see Several chat platforms); `--platform` overrides (`--platform discord,slack`)",
		read: readPlatforms},

	{name: "agent.exit_grace", def: "2s", doc: "each step of stopping an agent: after closing stdin, after SIGTERM; at shutdown also the wait for a cancelled turn's answer (see Stopping)",
		read: func(r *reader, k string, c *Config) { c.Agent.ExitGrace = r.dur(k, 10*time.Millisecond, time.Minute) }},
	{name: "agent.max_line_bytes", def: 32 << 20, doc: "longest line read from an agent, at least 32 MiB (longer ones are skipped and counted; a request on one is answered `-32600`)",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxLineBytes = r.integer(k, 32<<20, 1<<30) }},
	{name: "agent.max_read_bytes", def: 8 << 20, doc: "most text one `fs/read_text_file` returns (ask for more and the agent is told to ask for fewer lines)",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxReadBytes = r.integer(k, 1<<10, 1<<30) }},
	{name: "agent.max_write_bytes", def: 16 << 20, doc: "most text one `fs/write_text_file` writes",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxWriteBytes = r.integer(k, 1<<10, 1<<30) }},
	{name: "agent.max_requests", def: 64, doc: "the agent's requests (permission, files) served at once; more, or more than 64 MiB of their params, are refused at once with an error",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxRequests = r.integer(k, 1, 10000) }},
	{name: "agent.max_terminals", def: 8, doc: "terminals one agent session may have open (`terminal/create` past it is refused until one is released)",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxTerminals = r.integer(k, 1, 1000) }},
	{name: "agent.max_terminal_bytes", def: 1 << 20, doc: "most output one terminal keeps, its end (a smaller `outputByteLimit` wins)",
		read: func(r *reader, k string, c *Config) { c.Agent.MaxTerminalBytes = r.integer(k, 1<<10, 1<<30) }},
	{name: "agent.sandbox", def: "bwrap", doc: "run each agent in a bubblewrap sandbox (see Security model); `launcher` through `agent.launcher` (a container or cluster); `none` unconfined",
		read: func(r *reader, k string, c *Config) { c.Agent.Sandbox = r.oneOf(k, "bwrap", "none", "launcher") }},
	{name: "agent.sandbox_network", def: true, doc: "deprecated: `false` is `agent.network = \"none\"` for every profile that sets no `network` of its own",
		read: func(r *reader, k string, c *Config) { c.Agent.SandboxNetwork = r.boolean(k) }},
	{name: "agent.launcher", def: []string{}, doc: "with `agent.sandbox = \"launcher\"`: the command each agent is started through (see Security model)",
		read: readLauncher},
	{name: "agent.launcher_stop", def: []string{}, doc: "with a launcher: the command run once such an agent is stopped",
		read: func(r *reader, k string, c *Config) { c.Agent.LauncherStop = r.strs(k) }},
	{name: "agent.run_as_user", def: "", doc: "a broker started as root runs agents as this user (name or uid), their workspaces given to it; required as root with `agent.sandbox = \"bwrap\"` (see Security model)",
		read: readRunAs},

	{name: defaultProfileKey, def: "", live: true, shown: "the only profile", doc: "the profile a new thread gets when its channel names none (required with several `[agents.NAME]`); see Agent profiles",
		read: readDefaultProfile},

	{name: "turn.timeout", def: "30m", live: true, doc: "hard ceiling of one turn, from the prompt (at most `6h`)",
		read: func(r *reader, k string, c *Config) { c.Turn.Timeout = r.dur(k, time.Second, MaxTurnTimeout) }},
	{name: "turn.liveness_interval", def: "30s", live: true, doc: "how often a running turn checks its agent is alive (exit is noticed at once anyway)",
		read: func(r *reader, k string, c *Config) {
			c.Turn.LivenessInterval = r.dur(k, 10*time.Millisecond, time.Hour)
		}},
	{name: "turn.cancel_grace", def: "10s", live: true, doc: "after `session/cancel`, how long to wait for the agent's answer before stopping it (at shutdown at most `agent.exit_grace`)",
		read: func(r *reader, k string, c *Config) {
			c.Turn.CancelGrace = r.dur(k, 10*time.Millisecond, 10*time.Minute)
		}},
	{name: "turn.tool_timeout", def: "10m", live: true, doc: "a tool call with no update this long, in a turn with no other progress, cancels the turn (`0s`: never)",
		read: func(r *reader, k string, c *Config) {
			c.Turn.ToolTimeout = r.dur(k, 0, MaxTurnTimeout)
			if c.Turn.ToolTimeout > 0 && c.Turn.ToolTimeout < time.Second {
				r.fail(k, "= %s is too short: use 0s to disable, or at least 1s", c.Turn.ToolTimeout)
			}
		}},
	{name: "turn.queue_size", def: 8, live: true, doc: "messages waiting behind a running turn, per thread",
		read: func(r *reader, k string, c *Config) { c.Turn.QueueSize = r.integer(k, 1, 1000) }},
	{name: "turn.busy", def: "queue", live: true, doc: "what a message from someone who may act on the thread (its starter, an approver) does while a turn runs: `queue` it, or `interrupt` the turn and be sent next in the same session; anyone else's queues (see Steering a turn)",
		read: func(r *reader, k string, c *Config) { c.Turn.Busy = r.oneOf(k, "queue", "interrupt") }},
	{name: "turn.update_queue", def: 1024, doc: "agent updates buffered per turn (and at most 64 MiB of them)",
		read: func(r *reader, k string, c *Config) { c.Turn.UpdateQueue = r.integer(k, 16, 1<<20) }},
	{name: "turn.permission_mode", def: "ask", live: true, doc: "`ask` a person, or `allow`/`deny` automatically (and say so)",
		read: func(r *reader, k string, c *Config) { c.Turn.PermissionMode = r.oneOf(k, "ask", "allow", "deny") }},
	{name: "turn.permission_timeout", def: "5m", live: true, doc: "an unanswered permission request is answered `cancelled`, an unanswered question `cancel`",
		read: func(r *reader, k string, c *Config) { c.Turn.PermissionTimeout = r.dur(k, time.Second, 24*time.Hour) }},

	{name: "pool.max_sessions", def: 8, doc: "live agent processes at most, of all profiles",
		read: func(r *reader, k string, c *Config) { c.Pool.MaxSessions = r.integer(k, 1, 10000) }},
	{name: "pool.idle_timeout", def: "30m", doc: "stop an agent idle this long (`0s`: never); its session is kept",
		read: func(r *reader, k string, c *Config) { c.Pool.IdleTimeout = r.dur(k, 0, 30*24*time.Hour) }},
	{name: "pool.slot_wait", def: "10m", live: true, doc: "how long a message waits for a free agent slot",
		read: func(r *reader, k string, c *Config) { c.Pool.SlotWait = r.dur(k, time.Second, 24*time.Hour) }},
	{name: "pool.warm", def: 0, doc: "agents of each profile kept started, initialized and waiting for a new thread, for profiles that set no `warm` of their own (counted in `pool.max_sessions`)",
		read: func(r *reader, k string, c *Config) { c.Pool.Warm = r.integer(k, 0, 10000) }},

	{name: "state.dir", def: "./state", doc: "the state database (see below)",
		read: func(r *reader, k string, c *Config) { c.State.Dir = r.str(k) }},
	{name: "state.retention", def: "168h", doc: "how long finished turns and idle threads are kept",
		read: func(r *reader, k string, c *Config) { c.State.Retention = r.dur(k, time.Hour, 365*24*time.Hour) }},
	{name: "watchdog.interval", def: "15s", live: true, doc: "how often the watchdog looks at running turns",
		read: func(r *reader, k string, c *Config) {
			c.Watchdog.Interval = r.dur(k, 100*time.Millisecond, 10*time.Minute)
		}},
	{name: "shutdown.grace", def: "15s", live: true, doc: "bound on the whole shutdown, however many agents hang (see Stopping)",
		read: func(r *reader, k string, c *Config) { c.Shutdown.Grace = r.dur(k, time.Second, 10*time.Minute) }},
	{name: "http.listen", def: "127.0.0.1:9464", doc: "metrics and health endpoints (`\"\"`: off)", read: readListen},
	{name: "api.listen", def: "", doc: "the HTTP API's own address (`\"\"`: off; see HTTP API); its clients are `[[api.tokens]]`", read: readAPIListen},
	{name: "api.rate_limit", def: 120, live: true, doc: "requests one API token may make per minute, in a burst of as many (past it: `429`)",
		read: func(r *reader, k string, c *Config) { c.API.RateLimit = r.integer(k, 1, 1000000) }},
	{name: "api.max_body_bytes", def: 1 << 20, live: true, doc: "largest API request body (past it: `413`)",
		read: func(r *reader, k string, c *Config) { c.API.MaxBodyBytes = int64(r.integer(k, 1<<10, 64<<20)) }},
	{name: "api.max_connections", def: 512, doc: "connections the API's listener holds open at once: past it the one idle longest is closed to make room (or the new one, when every one is busy), so a flood of connections cannot use up the broker's file descriptors",
		read: func(r *reader, k string, c *Config) { c.API.MaxConnections = r.integer(k, 8, 100000) }},
	{name: "api.max_streams", def: 32, live: true, doc: "event streams (`GET /v1/prompts/{id}/events`) one API token may have open at once (past it: `429`)",
		read: func(r *reader, k string, c *Config) { c.API.MaxStreams = r.integer(k, 1, 100000) }},
	{name: "web.listen", def: "", doc: "the web front end's address (`\"\"`: off; see Web front end), its own: another listener's (`http.listen`, `api.listen`, `slack.listen`) is refused",
		read: readWebListen},
	{name: "web.public_url", def: "", doc: "the address people reach the web front end at, for the sign-in links `/web` gives and the threads' *Open in browser* buttons (`\"\"`: `http://` and `web.listen`; an `https` one makes its cookies Secure)", read: readPublicURL},
	{name: "web.trusted_proxies", def: []string{}, doc: "the reverse proxies (CIDRs or addresses) in front of the web front end whose `X-Forwarded-For` it believes, for the client's address its sign-in limit counts by: the rightmost address there that is not one of them (none: the connection's own address)", read: readTrustedProxies},
	{name: "web.session_ttl", def: "12h", doc: "how long a sign-in to the web front end lasts",
		read: func(r *reader, k string, c *Config) { c.Web.SessionTTL = r.dur(k, time.Minute, 30*24*time.Hour) }},

	{name: "discord.token", def: "", secret: true, shown: "", doc: "the bot token (better: `BROKER_DISCORD_TOKEN`, or `discord.token_file`)",
		read: func(r *reader, k string, c *Config) { c.Discord.Token = r.str(k) }},
	{name: "discord.token_file", def: "", secret: true, doc: "a file holding the token (e.g. a systemd credential)", read: readTokenFile},
	{name: "discord.api_url", def: discordAPIURL, doc: "where REST calls and the gateway lookup go (an API proxy)", read: readAPIURL},
	{name: "discord.allowed_channels", def: []string{}, live: true, doc: "channels where a mention starts a conversation (a `[channels.\"ID\"]` table allows its channel too)",
		read: func(r *reader, k string, c *Config) { c.Discord.AllowedChannels = r.strs(k) }},
	{name: "discord.allow_all_channels", def: false, live: true, doc: "allow every channel the bot can see",
		read: func(r *reader, k string, c *Config) { c.Discord.AllowAllChannels = r.boolean(k) }},
	{name: "discord.allowed_users", def: []string{}, live: true, doc: "users who may use the bot (with `allowed_roles` empty too: everyone in allowed channels); others get 🚫",
		read: func(r *reader, k string, c *Config) { c.Discord.AllowedUsers = r.strs(k) }},
	{name: "discord.allowed_roles", def: []string{}, live: true, doc: "role ids whose members may use the bot",
		read: func(r *reader, k string, c *Config) { c.Discord.AllowedRoles = r.strs(k) }},
	{name: "discord.approvers", def: []string{}, live: true, doc: "users who may act on any thread: answer its questions, cancel, reset",
		read: func(r *reader, k string, c *Config) { c.Discord.Approvers = r.strs(k) }},
	{name: "discord.approver_roles", def: []string{}, live: true, doc: "role ids whose members may do the same",
		read: func(r *reader, k string, c *Config) { c.Discord.ApproverRoles = r.strs(k) }},
	{name: "discord.allowed_bots", def: []string{}, live: true, doc: "bots whose messages count as prompts (other bots are ignored)",
		read: func(r *reader, k string, c *Config) { c.Discord.AllowedBots = r.strs(k) }},
	{name: "discord.show_thoughts", def: false, live: true, doc: "show the agent's thoughts, quoted",
		read: func(r *reader, k string, c *Config) { c.Discord.ShowThoughts = r.boolean(k) }},
	{name: "discord.edit_interval", def: "1250ms", doc: "least time between two message calls of one answer (Discord allows 5 per 5s per channel)",
		read: func(r *reader, k string, c *Config) {
			c.Discord.EditInterval = r.dur(k, 200*time.Millisecond, time.Minute)
		}},
	{name: "discord.max_answer_messages", def: 6, doc: "messages per answer before it is attached as a file",
		read: func(r *reader, k string, c *Config) { c.Discord.MaxMessages = r.integer(k, 1, 50) }},
	{name: "discord.max_image_bytes", def: 8 << 20, doc: "largest image attachment",
		read: func(r *reader, k string, c *Config) { c.Discord.MaxImageBytes = int64(r.integer(k, 1, 25<<20)) }},
	{name: "discord.max_file_bytes", def: 8 << 20, doc: "largest file attached to an answer: a part of a long answer, a diff, or a file the agent shows (a message carries at most 10 MiB of files)",
		read: func(r *reader, k string, c *Config) { c.Discord.MaxFileBytes = r.integer(k, 1<<10, 10<<20) }},
	{name: "discord.max_text_bytes", def: 256 << 10, doc: "largest text attachment inlined into the prompt",
		read: func(r *reader, k string, c *Config) { c.Discord.MaxTextBytes = int64(r.integer(k, 1, 4<<20)) }},

	{name: "slack.bot_token", def: "", secret: true, shown: "", doc: "the Bot User OAuth Token, `xoxb-…` (better: `BROKER_SLACK_BOT_TOKEN`, or `slack.bot_token_file`)",
		read: func(r *reader, k string, c *Config) { c.Slack.BotToken = r.str(k) }},
	{name: "slack.bot_token_file", def: "", secret: true, doc: "a file holding the bot token (e.g. a systemd credential)",
		read: func(r *reader, k string, c *Config) { r.secretFile(k, &c.Slack.BotToken, &c.Slack.BotTokenFile) }},
	{name: "slack.app_token", def: "", secret: true, shown: "", doc: "with `mode = \"socket\"`: the app-level token with `connections:write`, `xapp-…`, that opens the connection (better: `BROKER_SLACK_APP_TOKEN`, or `slack.app_token_file`)",
		read: func(r *reader, k string, c *Config) { c.Slack.AppToken = r.str(k) }},
	{name: "slack.app_token_file", def: "", secret: true, doc: "a file holding the app-level token",
		read: func(r *reader, k string, c *Config) { r.secretFile(k, &c.Slack.AppToken, &c.Slack.AppTokenFile) }},
	{name: "slack.mode", def: "socket", doc: "`socket`: Socket Mode, no public URL; `http`: Slack posts events and interactions to `slack.listen`",
		read: func(r *reader, k string, c *Config) { c.Slack.Mode = r.oneOf(k, "socket", "http") }},
	{name: "slack.signing_secret", def: "", secret: true, shown: "", doc: "with `mode = \"http\"`: the app's Signing Secret, which every request must be signed with (better: `BROKER_SLACK_SIGNING_SECRET`, or `slack.signing_secret_file`)",
		read: func(r *reader, k string, c *Config) { c.Slack.SigningSecret = r.str(k) }},
	{name: "slack.signing_secret_file", def: "", secret: true, doc: "a file holding the signing secret",
		read: func(r *reader, k string, c *Config) {
			r.secretFile(k, &c.Slack.SigningSecret, &c.Slack.SigningSecretFile)
		}},
	{name: "slack.listen", def: "", doc: "with `mode = \"http\"`: the address Slack's requests come to (events at `/slack/events`, interactivity at `/slack/interactivity`, the command at `/slack/commands`), behind a TLS proxy",
		read: func(r *reader, k string, c *Config) { c.Slack.Listen = r.address(k) }},
	{name: "slack.api_url", def: slackAPIURL, doc: "where Web API calls go (an API proxy)",
		read: func(r *reader, k string, c *Config) { c.Slack.APIURL = r.httpURL(k, slackAPIURL) }},
	{name: "slack.allowed_channels", def: []string{}, live: true, doc: "channel ids (`C…`) where a mention starts a conversation (a `[channels.\"ID\"]` table allows its channel too)",
		read: func(r *reader, k string, c *Config) { c.Slack.AllowedChannels = r.strs(k) }},
	{name: "slack.allow_all_channels", def: false, live: true, doc: "allow every channel the app is in",
		read: func(r *reader, k string, c *Config) { c.Slack.AllowAllChannels = r.boolean(k) }},
	{name: "slack.allowed_users", def: []string{}, live: true, doc: "user ids (`U…`) who may use the app (with `allowed_groups` empty too: everyone in allowed channels); others get 🚫",
		read: func(r *reader, k string, c *Config) { c.Slack.AllowedUsers = r.strs(k) }},
	{name: "slack.allowed_groups", def: []string{}, live: true, doc: "user group ids (`S…`) whose members may use the app",
		read: func(r *reader, k string, c *Config) { c.Slack.AllowedGroups = r.strs(k) }},
	{name: "slack.approvers", def: []string{}, live: true, doc: "user ids who may act on any thread: answer its questions, cancel, reset",
		read: func(r *reader, k string, c *Config) { c.Slack.Approvers = r.strs(k) }},
	{name: "slack.approver_groups", def: []string{}, live: true, doc: "user group ids whose members may do the same",
		read: func(r *reader, k string, c *Config) { c.Slack.ApproverGroups = r.strs(k) }},
	{name: "slack.allow_dms", def: false, live: true, doc: "direct messages with the app open threads too (a user on no list is refused there as anywhere)",
		read: func(r *reader, k string, c *Config) { c.Slack.AllowDMs = r.boolean(k) }},
	{name: "slack.show_thoughts", def: false, live: true, doc: "show the agent's thoughts, quoted",
		read: func(r *reader, k string, c *Config) { c.Slack.ShowThoughts = r.boolean(k) }},
	{name: "slack.edit_interval", def: "1500ms", doc: "least time between two message calls of one answer (Slack allows `chat.update` about 50 a minute in a workspace, and about one new message a second in a channel)",
		read: func(r *reader, k string, c *Config) {
			c.Slack.EditInterval = r.dur(k, 200*time.Millisecond, time.Minute)
		}},
	{name: "slack.max_answer_messages", def: 6, doc: "messages per answer before it is attached as a file",
		read: func(r *reader, k string, c *Config) { c.Slack.MaxMessages = r.integer(k, 1, 50) }},
	{name: "slack.max_image_bytes", def: 8 << 20, doc: "largest image a user shares",
		read: func(r *reader, k string, c *Config) { c.Slack.MaxImageBytes = int64(r.integer(k, 1, 25<<20)) }},
	{name: "slack.max_file_bytes", def: 8 << 20, doc: "largest file attached to an answer: a part of a long answer, a diff, or a file the agent shows (a message carries at most 50 MiB of files)",
		read: func(r *reader, k string, c *Config) { c.Slack.MaxFileBytes = r.integer(k, 1<<10, 50<<20) }},
	{name: "slack.max_text_bytes", def: 256 << 10, doc: "largest text file inlined into the prompt",
		read: func(r *reader, k string, c *Config) { c.Slack.MaxTextBytes = int64(r.integer(k, 1, 4<<20)) }},
}, clusterKeys...)

// fileKey is a key read where it is rather than through the table: an
// array of tables, or a table per channel. It has no default to set and
// no BROKER_* form; it is here for its line in the README.
type fileKey struct {
	table, name, shown, reload, doc string
}

// fileKeys are the keys outside keys and profileKeys; table is the
// README table they are listed in ("" or "agent.").
var fileKeys = []fileKey{
	{table: "agent.", name: "agent." + mcpServersField, shown: "`[]`", reload: "new agents",
		doc: "MCP servers given to its agents' sessions: `[[agent.mcp_servers]]` tables (see MCP servers); from the file only"},
	{table: "agent.", name: "agent." + permissionsField, shown: "`[]`", reload: "new agents",
		doc: "rules that decide its agents' permission requests before anyone is asked: `[[agent.permissions]]` tables (see Permission rules); from the file only"},
	{table: "", name: `channels."ID".agent`, shown: "—", reload: "yes",
		doc: "the profile new threads of channel ID get, which allows the channel too (see Agent profiles); from the file only"},
	{table: "", name: "api.tokens", shown: "`[]`", reload: "yes",
		doc: "the API's clients: `[[api.tokens]]` tables with `name`, `token` or `token_file`, `channels`, `agents`, `may_approve`, `web_admin` (see HTTP API, Web front end); from the file only, besides the one `BROKER_API_TOKEN` gives"},
	{table: "", name: "schedules", shown: "`[]`", reload: "yes",
		doc: "prompts the broker submits on a schedule: `[[schedules]]` tables (see Schedules); from the file only"},
}

// profileKeys are the keys of an agent profile, in README order.
var profileKeys = []profileKey{
	{name: "command", def: "", shown: "—", doc: "the agent program (required: here or in each profile)",
		read: func(r *reader, k string, p *Profile) { p.Command = r.str(k) }},
	{name: "args", def: []string{}, doc: "its arguments",
		read: func(r *reader, k string, p *Profile) { p.Args = r.strs(k) }},
	{name: "env", def: []string{}, secret: true, doc: "`NAME=value` entries for its environment; `${VAR}` expands from the broker's",
		read: func(r *reader, k string, p *Profile) { p.Env = r.envList(k) }},
	{name: "description", def: "", doc: "one line shown by `/agents`",
		read: func(r *reader, k string, p *Profile) { p.Description = r.str(k) }},
	{name: "cwd", def: "./work", doc: "where its agents run",
		read: func(r *reader, k string, p *Profile) { p.Cwd = r.str(k) }},
	{name: "per_thread_dir", def: true, doc: "with `workspace = \"dir\"`: a directory per thread under `cwd` (`false`: all threads share `cwd`)",
		read: func(r *reader, k string, p *Profile) { p.PerThreadDir = r.boolean(k) }},
	{name: "workspace", def: "dir", doc: "`dir`, or `worktree`: each thread gets its own `git worktree` of `repo` on a branch named after the thread",
		read: func(r *reader, k string, p *Profile) { p.Workspace = r.oneOf(k, "dir", "worktree") }},
	{name: "repo", def: "", doc: "with `workspace = \"worktree\"`: the git repository, a clone of its own that its agents write (see Security model)",
		read: func(r *reader, k string, p *Profile) { p.Repo = r.str(k) }},
	{name: "base", def: "HEAD", doc: "with `workspace = \"worktree\"`: what new branches start from",
		read: func(r *reader, k string, p *Profile) { p.Base = r.str(k) }},
	{name: "shared_repo", def: "", doc: "with `workspace = \"worktree\"`: the repository (a path, `file://`, `ssh://` or `https://` URL) every agent host's clone of `repo` shares: a thread's branch is pushed there, fast-forward only, after each turn, and continues from there on another host (see Agents on several machines)",
		read: func(r *reader, k string, p *Profile) { p.SharedRepo = r.str(k) }},
	{name: "delete_branches", def: false, doc: "remove a thread's branch with its worktree past `state.retention` (kept by default)",
		read: func(r *reader, k string, p *Profile) { p.DeleteBranches = r.boolean(k) }},
	{name: "auth_method", def: "", doc: "method id for `authenticate`, when the agent requires it",
		read: func(r *reader, k string, p *Profile) { p.AuthMethod = r.str(k) }},
	{name: "start_timeout", def: "60s", doc: "spawn, `initialize` and session set-up",
		read: func(r *reader, k string, p *Profile) { p.StartTimeout = r.dur(k, time.Second, time.Hour) }},
	{name: "sandbox_ro", def: []string{}, doc: "more absolute paths its sandboxed agents may read, at the same place (its own configuration, a tool cache); other profiles' agents do not see them",
		read: func(r *reader, k string, p *Profile) { p.SandboxRO = r.absPaths(k) }},
	{name: "sandbox_rw", def: []string{}, doc: "more absolute paths its sandboxed agents may write, at the same place (e.g. `~/.claude`, `CODEX_HOME`)",
		read: func(r *reader, k string, p *Profile) { p.SandboxRW = r.absPaths(k) }},
	{name: "network", def: "proxy", doc: "what network its sandboxed agents (their terminals and MCP servers too) have: `proxy`, a network of their own whose only way out is the broker's proxy to `allow_hosts`; `none`, no network at all; `host`, the host's (every port on its loopback and LAN: the broker's own listeners too; see Network)",
		read: func(r *reader, k string, p *Profile) { p.Network = r.oneOf(k, "proxy", "none", "host") }},
	{name: "allow_hosts", def: netproxy.DefaultAllow, shown: "the model providers", doc: "with `network = \"proxy\"`: the hosts its agents may reach, each a name (`api.example.com`), a pattern (`*.example.com`: any name under it) or an address, with an optional port (`:8443`; none: 443 and 80); an address on loopback, the LAN or link-local is reached only when an entry names it with its port (see Network)",
		read: func(r *reader, k string, p *Profile) {
			p.AllowHosts = r.strs(k)
			if _, err := netproxy.ParseAllow(p.AllowHosts); err != nil {
				r.fail(k, "%v", err)
			}
		}},
	{name: "max_sessions", def: 0, doc: "live agents of this profile at most, within `pool.max_sessions` (`0`: only that bound; above it, `check-config` and the log warn)",
		read: func(r *reader, k string, p *Profile) { p.MaxSessions = r.integer(k, 0, 10000) }},
	{name: "memory_max", def: "4GiB", doc: "most memory each of its agents may use, with all it starts (its terminals' commands too): bytes, or with a unit (`512MiB`, `4GiB`); past it the kernel kills the agent and the thread is told so (`0`: no limit; see Resource limits)",
		read: func(r *reader, k string, p *Profile) { p.MemoryMax = r.size(k, 16<<20, 1<<50) }},
	{name: "pids_max", def: 4096, doc: "most processes and threads each of its agents may have at once, with all it starts: a fork bomb stops there (`0`: no limit)",
		read: func(r *reader, k string, p *Profile) { p.PidsMax = int64(r.integerOrZero(k, 16, 1<<22)) }},
	{name: "busy", def: "", shown: "`turn.busy`", doc: "`queue` or `interrupt`: `turn.busy` for this profile's threads",
		read: func(r *reader, k string, p *Profile) { p.Busy = r.oneOf(k, "", "queue", "interrupt") }},
	{name: "fork_max_size", def: "1GiB", doc: "with `per_thread_dir`: the most a thread's directory may hold for `/fork` to copy it for the new thread (`0`: no bound; see Sessions)",
		read: func(r *reader, k string, p *Profile) { p.ForkMaxSize = r.size(k, 1<<10, 1<<50) }},
	{name: "hosts", def: []string{}, doc: "with `cluster.url`: `key=value` selectors an agent host's `host.labels` must all match to run its agents (`[]`: any host; see Agent hosts)",
		read: func(r *reader, k string, p *Profile) { p.Hosts = r.labels(k) }},
	{name: "warm", def: 0, shown: "`pool.warm`", doc: "its agents kept started and initialized, waiting for a new thread, so that its first answer does not wait for the agent's start (counted in `max_sessions`); `agent.warm = 0` leaves it to `pool.warm`, `agents.NAME.warm = 0` means none",
		read: func(r *reader, k string, p *Profile) { p.Warm = r.integer(k, 0, 10000) }},
	{name: "restart_after_cancel", def: false, doc: "replace the agent process after every cancelled turn, even one it answered; the next prompt resumes the session (claude-agent-acp 0.23.1 needs it)",
		read: func(r *reader, k string, p *Profile) { p.RestartAfterCancel = r.boolean(k) }},
}

// Platforms are the chat platforms chat.platform may name. The console
// is served alone; the others may be served together, one broker, one
// pool and one store for all of them.
var Platforms = []string{"console", "discord", "slack"}

// Console is the platform served alone: the terminal the broker runs on.
const Console = "console"

// None, as chat.platform, serves no chat at all: the broker serves its
// HTTP API alone.
const None = "none"

// readPlatforms reads chat.platform: a name, or a list of names (from the
// environment, separated by commas or spaces), each once; the console
// alone.
func readPlatforms(r *reader, k string, c *Config) {
	names := r.strs(k)
	c.Chat.Platforms = names
	if len(names) == 1 && names[0] == None {
		c.Chat.Platforms = nil // the API alone
		return
	}
	if len(names) == 0 {
		r.fail(k, "is empty: name a chat platform, one of %s", strings.Join(Platforms, ", "))
		return
	}
	seen := map[string]bool{}
	for _, name := range names {
		switch {
		case name == None:
			r.fail(k, "= %v: \"none\" (the API alone) is named alone", names)
		case !slices.Contains(Platforms, name):
			r.fail(k, "has %q, which is not a chat platform: one of %s, or \"none\" for the API alone", name, strings.Join(Platforms, ", "))
		case seen[name]:
			r.fail(k, "has %q twice", name)
		}
		seen[name] = true
	}
	if len(names) > 1 && seen[Console] {
		r.fail(k, "= %v: the console is served alone; name it alone, or the other platforms without it", names)
	}
}

func readLauncher(r *reader, k string, c *Config) {
	c.Agent.Launcher = r.strs(k)
	if r.v.GetString("agent.sandbox") != "launcher" {
		return
	}
	if len(c.Agent.Launcher) == 0 {
		r.fail(k, "is required with agent.sandbox = \"launcher\": the command agents are started through, e.g. [\"docker\", \"run\", \"--rm\", \"-i\", …]")
	}
}

// readRunAs reads agent.run_as_user's name; the broker finds the user
// where it is wired.
func readRunAs(r *reader, k string, c *Config) { c.Agent.RunAsUser = r.str(k) }

// readDefaultProfile reads agents.default; Load checks it names a
// profile once the profiles are read.
func readDefaultProfile(r *reader, k string, c *Config) {
	if val, ok := r.env[envName(k)]; ok {
		r.record(k, val)
		c.DefaultProfile = val
		return
	}
	if _, ok := r.v.Get(k).(map[string]any); ok {
		r.fail(k, "is the default profile's name, not a profile: write default = \"NAME\" under [agents], and give the profile another name")
		return
	}
	c.DefaultProfile = r.str(k)
}

func readListen(r *reader, k string, c *Config) {
	c.HTTP.Listen = r.str(k)
	if c.HTTP.Listen == "" {
		return
	}
	if _, port, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		r.fail(k, "= %q is not a host:port address (e.g. 127.0.0.1:9464; empty to serve nothing)", c.HTTP.Listen)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.fail(k, "= %q has no port number", c.HTTP.Listen)
	}
}

func readAPIListen(r *reader, k string, c *Config) {
	c.API.Listen = r.str(k)
	if c.API.Listen == "" {
		return
	}
	if _, port, err := net.SplitHostPort(c.API.Listen); err != nil {
		r.fail(k, "= %q is not a host:port address (e.g. 127.0.0.1:9480; empty for no API)", c.API.Listen)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.fail(k, "= %q has no port number", c.API.Listen)
	} else if http := r.v.GetString("http.listen"); http != "" && http == c.API.Listen && n != 0 {
		r.fail(k, "= %q is http.listen's address too: the API has a listener of its own", c.API.Listen)
	}
}

// readPublicURL reads web.public_url: an http(s) URL, or none.
func readPublicURL(r *reader, k string, c *Config) {
	if r.str(k) == "" {
		return
	}
	c.Web.PublicURL = strings.TrimSuffix(r.httpURL(k, "https://broker.example.com"), "/")
}

// readTokenFile runs after discord.token: the token itself wins.
func readTokenFile(r *reader, k string, c *Config) {
	r.secretFile(k, &c.Discord.Token, &c.Discord.TokenFile)
}

// secretFile reads key k, a file holding a secret, into secret, unless
// the secret is set already (by its own key, which is read first and
// wins); file records where it was read from.
func (r *reader) secretFile(k string, secret, file *string) {
	path := r.str(k)
	if path == "" || *secret != "" {
		return
	}
	*file = path
	s, err := readSecretFile(path)
	if err != nil {
		r.fail(k, "cannot be read: %v", err)
	}
	*secret = s
}

func readAPIURL(r *reader, k string, c *Config) {
	c.Discord.APIURL = r.httpURL(k, discordAPIURL)
}

// httpURL reads an http(s) URL; like is one, for the error.
func (r *reader) httpURL(k, like string) string {
	s := r.str(k)
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(k, "= %q is not an http(s) URL like %s", s, like)
	}
	return s
}

// address reads a host:port address to listen on ("" for none).
func (r *reader) address(k string) string {
	s := r.str(k)
	if s == "" {
		return s
	}
	if _, port, err := net.SplitHostPort(s); err != nil {
		r.fail(k, "= %q is not a host:port address (e.g. 127.0.0.1:3000)", s)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		r.fail(k, "= %q has no port number", s)
	}
	return s
}

// defaults lists every fixed key with its default: those of keys, and
// the profile keys under [agent].
var defaults = func() map[string]any {
	m := map[string]any{}
	for _, k := range keys {
		m[k.name] = k.def
	}
	for _, k := range profileKeys {
		m["agent."+k.name] = k.def
	}
	return m
}()

// Key describes one key of the table, for tests that hold every key to
// what it promises.
type Key struct {
	Name string
	// Live: a reload applies it; any other change needs a restart.
	Live bool
}

// Keys are the broker's keys outside agent profiles, in README order.
func Keys() []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{Name: k.name, Live: k.live}
	}
	return out
}

// ProfileKeys are the names of an agent profile's keys ("command",
// "cwd"…), as written in [agent] or [agents.NAME], in README order.
func ProfileKeys() []string {
	out := make([]string, len(profileKeys))
	for i, k := range profileKeys {
		out[i] = k.name
	}
	return out
}

// liveKeys can change on SIGHUP; any other changed key needs a restart
// (profiles' keys change for new agents: see profileKey).
var liveKeys = func() []string {
	var out []string
	for _, k := range keys {
		if k.live {
			out = append(out, k.name)
		}
	}
	return out
}()

// secretKey reports whether a key's values are never logged.
func secretKey(name string) bool {
	if strings.HasSuffix(name, "."+mcpServersField+mcpSecretsSuffix) || name == tokensField+".secrets" {
		return true
	}
	for _, k := range keys {
		if k.name == name {
			return k.secret
		}
	}
	_, field, ok := profileField(name)
	if ok {
		for _, k := range profileKeys {
			if k.name == field {
				return k.secret
			}
		}
	}
	return false
}

// profileField splits "agent.X" or "agents.NAME.X" into the profile ("" for
// [agent]) and X.
func profileField(name string) (profile, field string, ok bool) {
	if f, ok := strings.CutPrefix(name, "agent."); ok {
		return "", f, true
	}
	rest, ok := strings.CutPrefix(name, "agents.")
	if !ok {
		return "", "", false
	}
	profile, field, ok = strings.Cut(rest, ".")
	return profile, field, ok
}

// keyTable renders the README table of the keys whose names start with
// prefix ("" for the rest): key, default, SIGHUP, meaning.
func keyTable(prefix string) string {
	var b strings.Builder
	b.WriteString("| key | default | reload | meaning |\n| --- | --- | --- | --- |\n")
	row := func(name string, def any, shown string, live string, doc string) {
		d := shown
		if d == "" {
			d = "`" + defaultText(def) + "`"
		}
		if d == "``" {
			d = "`\"\"`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, d, live, doc)
	}
	switch prefix {
	case "agent.":
		for _, k := range profileKeys {
			row("agent."+k.name, k.def, k.shown, "new agents", k.doc)
		}
	default:
		for _, k := range keys {
			if tableOf(k.name) != prefix {
				continue
			}
			live := "restart"
			if k.live {
				live = "yes"
			}
			row(k.name, k.def, k.shown, live, k.doc)
		}
	}
	for _, k := range fileKeys {
		if k.table == prefix {
			row(k.name, nil, k.shown, k.reload, k.doc)
		}
	}
	return b.String()
}

// platformTables are the chat platforms whose keys have a README table
// of their own.
var platformTables = []string{"discord.", "slack."}

// tableOf is the README table a key of keys is listed in: its platform's
// ("discord."), or "".
func tableOf(name string) string {
	for _, t := range platformTables {
		if strings.HasPrefix(name, t) {
			return t
		}
	}
	return ""
}

func defaultText(v any) string {
	switch v := v.(type) {
	case []string:
		return "[" + strings.Join(v, ", ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// millis writes a default duration as the README gives it: "1250ms".
// The platforms' default API addresses, as their packages' DefaultAPIURL
// say (a test where the broker is wired checks that they agree).
const (
	discordAPIURL = "https://discord.com/api/v9/"
	slackAPIURL   = "https://slack.com/api/"
)
