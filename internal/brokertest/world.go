package brokertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"acpbroker/cgroup"
	"acpbroker/internal/agenttest"
	"acpbroker/internal/fakediscord"
	"acpbroker/internal/fakeslack"

	"github.com/rs/zerolog"
)

// GuildID and Token are the guild a World's channel is in and the bot
// token its brokers present.
const (
	GuildID = "100"
	Token   = "brokertest-bot-token"
)

// Users of a World: Alice, Bob and Carol are members of its guild.
var (
	Alice = fakediscord.User{ID: "201", Username: "alice", GlobalName: "Alice"}
	Bob   = fakediscord.User{ID: "202", Username: "bob", GlobalName: "Bob"}
	Carol = fakediscord.User{ID: "203", Username: "carol", GlobalName: "Carol"}
)

// Options shape a World: the fake Discord's options (Token is set for
// you) and configuration keys over the World's defaults (nil removes a
// key).
type Options struct {
	Fake fakediscord.Options
	// Slack, if set, gives the World a fake Slack too, with these
	// options (see World.Slack).
	Slack *fakeslack.Options
	Conf  Settings
	// LogTail is how much of each broker's log the test's cleanup
	// prints when the test failed (default 32 KiB; negative: none).
	LogTail int
}

// World is a fake Discord with a guild, one allowed channel and three
// users, a directory for the broker's configuration, state and agents,
// and the configuration its brokers run with. Its fake Discord closes at
// the test's cleanup, after every broker it started has stopped.
type World struct {
	TB      testing.TB
	Bins    Binaries
	Srv     *fakediscord.Server
	Discord Discord // the fake seen as a user: the World's channel
	Channel string
	// Slack is the fake Slack, if Options.Slack asked for one: its
	// channel is allowed and its tokens and Web API are configured, and
	// chat.platform says whether a broker serves it.
	Slack *Slack
	Dir   string // configuration, state.dir and logs are here
	Work  string // agent.cwd
	Conf  Settings
	// Raw is TOML appended to the configuration Conf renders, for what
	// Settings cannot say (arrays of tables such as
	// [[agents.NAME.mcp_servers]]); read at each Start.
	Raw string
	Env []string // more of the broker's environment (NAME=value), read at each Start
	// BrokerUser, if set, is the user the broker itself runs as (the
	// test runs as root), as under systemd: each Start gives it Dir and
	// all in it.
	BrokerUser *syscall.Credential

	logTail int

	mu         sync.Mutex
	starts     int
	brokerPIDs []int // of every broker started, for AgentProcs to leave out
}

// NewWorld makes a World. The default configuration logs JSON at info
// level, serves metrics on a free port, runs the fake agent in Work,
// keeps state in Dir/state and allows the World's channel. Run as root,
// it runs sandboxed agents as agenttest.AgentUser (agent.run_as_user,
// unless Conf names one, "" for none), to whom Dir is opened.
func NewWorld(tb testing.TB, bins Binaries, opts Options) *World {
	tb.Helper()
	opts.Fake.Token = Token
	srv := fakediscord.New(tb, opts.Fake)
	for _, u := range []fakediscord.User{Alice, Bob, Carol} {
		srv.AddUser(u)
	}
	dir, err := filepath.EvalSymlinks(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	if agenttest.AgentUser() != "" {
		agenttest.Traversable(tb, dir)
	}
	w := &World{TB: tb, Bins: bins, Srv: srv, Dir: dir, Work: filepath.Join(dir, "work"), logTail: opts.LogTail}
	if w.logTail == 0 {
		w.logTail = 32 << 10
	}
	w.Channel = srv.AddChannel(GuildID, "", "agents")
	w.Discord = Discord{Srv: srv, Channel: w.Channel}
	// Runs once every broker of the World has stopped: what a broker
	// killed with SIGKILL left in the cgroup file system goes too.
	tb.Cleanup(func() {
		if dir, ok := w.Conf["state.dir"].(string); ok {
			if err := cgroup.Sweep(cgroup.NameFor(dir), zerolog.Nop()); err != nil {
				tb.Errorf("agents' control groups left behind: %v", err)
			}
		}
	})
	w.Conf = Settings{
		"log.format":               "json",
		"log.level":                "info",
		"chat.platform":            "discord",
		"agent.command":            bins.Agent,
		"agent.cwd":                w.Work,
		"state.dir":                filepath.Join(dir, "state"),
		"http.listen":              "127.0.0.1:0",
		"discord.token":            Token,
		"discord.api_url":          srv.APIURL(),
		"discord.allowed_channels": []string{w.Channel},
	}
	if opts.Slack != nil {
		w.Slack = newSlack(w, *opts.Slack)
		w.Conf = w.Conf.With(Settings{
			"slack.bot_token":        w.Slack.Srv.BotToken(),
			"slack.app_token":        w.Slack.Srv.AppToken(),
			"slack.api_url":          w.Slack.Srv.APIURL(),
			"slack.allowed_channels": []string{w.Slack.Channel},
		})
	}
	w.Conf = w.Conf.With(opts.Conf)
	return w
}

// SlackOverHTTP has the World's brokers take Slack's events over HTTP
// (slack.mode = "http") on a free port, signed with the fake's signing
// secret: once a broker is ready the fake posts to it.
func (w *World) SlackOverHTTP() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	w.Conf = w.Conf.With(Settings{
		"slack.mode":           "http",
		"slack.listen":         addr,
		"slack.signing_secret": w.Slack.Srv.SigningSecret(),
	})
	return nil
}

// Platforms are the chat platforms the World's brokers serve, as
// chat.platform says.
func (w *World) Platforms() []string {
	switch p := w.Conf["chat.platform"].(type) {
	case string:
		return []string{p}
	case []string:
		return p
	}
	return nil
}

// serves reports whether the World's brokers serve the platform.
func (w *World) serves(platform string) bool { return slices.Contains(w.Platforms(), platform) }

// slackHTTP is the address the World's brokers take Slack's requests
// on ("" in Socket Mode).
func (w *World) slackHTTP() string {
	if mode, _ := w.Conf["slack.mode"].(string); mode != "http" {
		return ""
	}
	addr, _ := w.Conf["slack.listen"].(string)
	return addr
}

// slackConnections are the Socket Mode connections the fake Slack has
// accepted (0 without one).
func (w *World) slackConnections() int {
	if w.Slack == nil {
		return 0
	}
	return w.Slack.Srv.SocketStats().Connections
}

// slackReady waits, with wait, until the fake Slack reaches a broker
// that serves it: over Socket Mode, a connection greeted, and opened
// after the first since (those of a broker killed before may look open
// a while yet); over HTTP, the fake told where to post.
func (w *World) slackReady(since int, wait func(what string) error) error {
	if addr := w.slackHTTP(); addr != "" {
		base := "http://" + addr
		w.Slack.Srv.UseHTTP(fakeslack.Endpoints{Events: base + "/slack/events", Interactivity: base + "/slack/interactivity", Commands: base + "/slack/commands"})
		return nil
	}
	w.Slack.Srv.UseSocketMode()
	for st := w.Slack.Srv.SocketStats(); st.Connections <= since || st.Ready == 0; st = w.Slack.Srv.SocketStats() {
		if err := wait("before connecting to Slack"); err != nil {
			return err
		}
	}
	return nil
}

// WriteConfig writes the World's configuration and returns its path.
func (w *World) WriteConfig() (string, error) {
	path := filepath.Join(w.Dir, "broker.toml")
	conf := w.Conf
	if _, set := conf["agent.run_as_user"]; !set && w.AgentUser() != "" {
		conf = conf.With(Settings{"agent.run_as_user": w.AgentUser()})
	}
	return path, os.WriteFile(path, []byte(conf.TOML()+w.Raw), 0o600)
}

// AgentUser is the agent.run_as_user the World's brokers run with: the
// configured one, else, for a broker run as root with sandboxed agents,
// agenttest.AgentUser; "" when agents run as the broker's own user.
func (w *World) AgentUser() string {
	if name, set := w.Conf["agent.run_as_user"]; set {
		s, _ := name.(string)
		return s
	}
	if sandbox, _ := w.Conf["agent.sandbox"].(string); (sandbox == "" || sandbox == "bwrap") && w.BrokerUser == nil {
		return agenttest.AgentUser()
	}
	return ""
}

// AgentPIDs lists the running processes of the fake agent binary (and
// its children) whose working directory is under Work.
func (w *World) AgentPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || exe != w.Bins.Agent {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err != nil || !strings.HasPrefix(cwd, w.Work+string(filepath.Separator)) && cwd != w.Work {
			continue
		}
		if agenttest.Running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// LeftoverAgents waits up to within for the World's agent processes to
// be gone, and returns those still running, killing them.
func (w *World) LeftoverAgents(within time.Duration) []int {
	var left []int
	for _, pid := range w.AgentPIDs() {
		if agenttest.WaitGone(pid, within) {
			continue
		}
		left = append(left, pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return left
}

// Start runs a broker with the World's configuration and waits, within
// ctx, until it serves HTTP (when http.listen is set), says it is ready
// and has registered its slash commands. The test's cleanup stops it
// (SIGTERM, then SIGKILL after 30s) and logs the end of its log if the
// test failed. On error the broker is killed.
func (w *World) Start(ctx context.Context) (*Broker, error) {
	path, err := w.WriteConfig()
	if err != nil {
		return nil, err
	}
	if u := w.BrokerUser; u != nil {
		err := filepath.WalkDir(w.Dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, int(u.Uid), int(u.Gid))
		})
		if err != nil {
			return nil, err
		}
	}
	w.mu.Lock()
	w.starts++
	n := w.starts
	w.mu.Unlock()
	b, err := start(w, path, filepath.Join(w.Dir, fmt.Sprintf("broker-%d.log", n)))
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.brokerPIDs = append(w.brokerPIDs, b.PID())
	w.mu.Unlock()
	w.TB.Cleanup(func() {
		b.Stop(30 * time.Second)
		if w.TB.Failed() && w.logTail > 0 {
			w.TB.Logf("broker log (pid %d, %s):\n%s", b.PID(), b.Log.Path(), b.Log.Tail(w.logTail))
		}
	})
	if err := b.awaitReady(ctx); err != nil {
		b.Kill()
		return nil, err
	}
	return b, nil
}

// Restart ends old, with SIGKILL if kill is set (as a crash or the OOM
// killer would) or else with SIGTERM, and starts a new broker on the
// same configuration and state.
func (w *World) Restart(ctx context.Context, old *Broker, kill bool) (*Broker, error) {
	if kill {
		old.Kill()
	} else if _, err := old.Stop(30 * time.Second); err != nil {
		return nil, err
	}
	return w.Start(ctx)
}
