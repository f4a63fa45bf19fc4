package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"acpbroker/config"
	"acpbroker/netproxy"
	"acpbroker/policy"
	"acpbroker/pool"
	"acpbroker/store"
	"acpbroker/workspace"

	"github.com/rs/zerolog"
)

// builtProfiles are the configured profiles as the pool takes them, and
// the secret values they carry.
type builtProfiles struct {
	profiles map[string]*pool.Profile
	secrets  []string
}

// buildProfiles makes each configured profile the pool's, once complete
// has found the programs it names and the user its agents run as: its
// environment built from the broker's (errors name the profile's env
// key), its working directory absolute, and a worktree profile's
// workspace hook, which gives made (if not nil) each worktree it makes
// or finds, its git commands confined by confine. secrets are the chat
// platforms' tokens and every profile's secret values.
func buildProfiles(cfg *config.Config, environ []string, made func(store.Worktree), confine workspace.Confiner, log zerolog.Logger) (*builtProfiles, error) {
	lookup := envLookup(environ)
	out := &builtProfiles{profiles: map[string]*pool.Profile{}, secrets: chatSecrets(cfg)}
	var errs []error
	said := map[string]bool{} // an error of [agent]'s env, once for every profile
	for _, name := range sortedKeys(cfg.Profiles) {
		p := cfg.Profiles[name]
		envKey := "agent.env"
		if k := "agents." + name + ".env"; cfg.Written(k) {
			envKey = k // written in the profile's own section
		}
		env, err := pool.BuildEnvFor(envKey, lookup, p.Env)
		if err != nil {
			if !said[err.Error()] {
				said[err.Error()] = true
				errs = append(errs, err)
			}
			continue
		}
		cwd, err := filepath.Abs(p.Cwd)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", cfg.ProfileKey(p, "cwd"), err))
			continue
		}
		pp := &pool.Profile{
			Command:            p.Command,
			Args:               p.Args,
			Env:                env,
			MCPServers:         p.MCPServers,
			WorkDir:            cwd,
			PerThreadDir:       p.PerThreadDir,
			AuthMethod:         p.AuthMethod,
			StartTimeout:       p.StartTimeout,
			RestartAfterCancel: p.RestartAfterCancel,
			MaxSessions:        p.MaxSessions,
			Warm:               p.Warm,
			MemoryMax:          p.MemoryMax,
			PidsMax:            p.PidsMax,
			SandboxRO:          slices.Clone(p.SandboxRO),
			SandboxRW:          slices.Clone(p.SandboxRW),
			Permissions:        nonNil(p.Permissions),
			Busy:               p.Busy,
			ForkMaxBytes:       p.ForkMaxSize,
			Network:            p.Network,
			AllowKey:           allowKey(cfg, p),
		}
		if pp.Allow, err = netproxy.ParseAllow(p.AllowHosts); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pp.AllowKey, err))
			continue
		}
		if pp.ForkMaxBytes == 0 {
			pp.ForkMaxBytes = math.MaxInt64 // fork_max_size = 0: no bound
		}
		abs := *p
		abs.Cwd = cwd
		if wt := worktreesFor(&abs, confine, log); wt != nil {
			pp.SandboxRW = append(pp.SandboxRW, gitDir(p))
			repo, err := filepath.Abs(p.Repo)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", cfg.ProfileKey(p, "repo"), err))
				continue
			}
			pp.Workspace = func(ctx context.Context, thread string) (string, error) {
				dir, _, err := wt.Prepare(ctx, worktreeThread(thread))
				if err == nil && made != nil {
					made(store.Worktree{Dir: dir, Thread: thread, Profile: p.Name, Repo: repo, Root: wt.Dir, DeleteBranches: wt.DeleteBranches})
				}
				return dir, err
			}
			if wt.SharedRepo != "" {
				// On an agent host, after each turn: the thread's branch
				// goes to the shared repository, for the host it may move to.
				pp.AfterTurn = func(ctx context.Context, thread string) error {
					return wt.Publish(ctx, worktreeThread(thread))
				}
			}
			pp.ForkWorkspace = func(ctx context.Context, parent, child string) (string, error) {
				dir, _, err := wt.PrepareFrom(ctx, worktreeThread(child), worktreeThread(parent))
				if err == nil && made != nil {
					made(store.Worktree{Dir: dir, Thread: child, Profile: p.Name, Repo: repo, Root: wt.Dir, DeleteBranches: wt.DeleteBranches})
				}
				return dir, err
			}
		}
		out.profiles[name] = pp
		out.secrets = append(out.secrets, secretValues(p, env)...)
	}
	return out, errors.Join(errs...)
}

// allowKey is the key p's allow_hosts was written in: its own
// section's, or [agent]'s.
func allowKey(cfg *config.Config, p *config.Profile) string {
	if k := "agents." + p.Name + ".allow_hosts"; cfg.Written(k) {
		return k
	}
	return "agent.allow_hosts"
}

// nonNil makes a profile without rules have none: the engine's own do
// not apply to its agents either.
func nonNil(rules []policy.Rule) []policy.Rule {
	if rules == nil {
		return []policy.Rule{}
	}
	return rules
}

// agentList describes the profiles now configured, with their agents'

// secretValues are the values of a profile the broker knows to be
// secret: what its env passes to agents (API keys), the env and header
// values of its MCP servers, as expanded, and the password of its
// shared_repo's URL, and its user over https (each may be a token).
func secretValues(p *config.Profile, env []string) []string {
	var vals []string
	if u, err := url.Parse(p.SharedRepo); err == nil && u.User != nil {
		if u.Scheme == "https" && u.User.Username() != "" {
			vals = append(vals, u.User.Username()) // a token, over https; over ssh a user ("git")
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			vals = append(vals, pw)
		}
	}
	for name := range p.Env {
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k == name {
				vals = append(vals, v)
			}
		}
	}
	for _, s := range p.MCPServers {
		for _, e := range s.Env {
			vals = append(vals, e.Value)
		}
		for _, h := range s.Headers {
			// "Bearer TOKEN": the token alone is a secret too.
			vals = append(vals, h.Value)
			if i := strings.LastIndexByte(h.Value, ' '); i >= 0 {
				vals = append(vals, h.Value[i+1:])
			}
		}
	}
	return vals
}

// chatSecrets are the chat platforms' tokens and secrets, those set.
func chatSecrets(cfg *config.Config) []string {
	var out []string
	for _, s := range []string{cfg.Discord.Token, cfg.Slack.BotToken, cfg.Slack.AppToken, cfg.Slack.SigningSecret} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
