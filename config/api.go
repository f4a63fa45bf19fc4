package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// APIConfig is the [api] table: the HTTP API, off unless Listen is set.
type APIConfig struct {
	Listen string
	// RateLimit is the requests one token may make per minute, in a
	// burst of as many.
	RateLimit int
	// MaxBodyBytes bounds a request's body.
	MaxBodyBytes int64
	// MaxConnections bounds the connections the API's listener holds
	// open; MaxStreams the event streams one token has open at once.
	MaxConnections, MaxStreams int
	Tokens                     []APIToken
}

// APIToken is one [[api.tokens]] table: a client of the API and what it
// may do.
type APIToken struct {
	Name string
	// Token is the bearer token (from token_file when TokenFile is set).
	Token, TokenFile string
	// Channels are those it may start prompts in, as "channel" (on any
	// platform) or "platform:channel"; "*" is every channel the bot
	// serves.
	Channels []string
	// Agents are the profiles it may name ("*": any); without, it gets
	// the channel's or the default.
	Agents []string
	// MayApprove: it may answer its prompts' permission requests.
	MayApprove bool
	// WebAdmin: it signs in to the web front end's operator's view.
	WebAdmin bool
}

// WebConfig is the [web] table: the web front end.
type WebConfig struct {
	// Listen is its address ("": off).
	Listen string
	// PublicURL is the address people reach it at, for the links the
	// chat gives out ("": http:// and Listen).
	PublicURL string
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// TrustedProxies are the networks whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
}

// MayUse reports whether the token may start prompts in channel of
// platform.
func (t APIToken) MayUse(platform, channel string) bool {
	return slices.Contains(t.Channels, "*") || slices.Contains(t.Channels, channel) || slices.Contains(t.Channels, platform+":"+channel)
}

// MayName reports whether the token may ask for the agent profile.
func (t APIToken) MayName(agent string) bool {
	return slices.Contains(t.Agents, "*") || slices.Contains(t.Agents, agent)
}

// tokensField is the array of [[api.tokens]] tables.
const tokensField = "api.tokens"

var tokenKeys = []string{"name", "token", "token_file", "channels", "agents", "may_approve", "web_admin"}

// minTokenLength is the shortest token taken: a token is a secret to
// guess, not a password to remember.
const minTokenLength = 16

// EnvTokenVar names one more client of the API, given by the
// environment rather than the file (make run's): its token, for a
// client named EnvTokenName that may use every channel and name every
// profile, and may answer its prompts' permission requests.
const (
	EnvTokenVar  = "BROKER_API_TOKEN"
	EnvTokenName = "env"
)

// publishedTokens are tokens the project's own examples have shown
// (config.example.toml, README.md): anyone may know them, so none is
// taken.
var publishedTokens = []string{"demo-token-change-me-0123456789"}

// readTokens reads the [[api.tokens]] tables of the file (doc as go-toml
// read it); profiles are read already.
func (r *reader) readTokens(doc map[string]any, c *Config) {
	apiTable, _ := foldGet(doc, "api").(map[string]any)
	raw := foldGet(apiTable, "tokens")
	list, ok := raw.([]any)
	if raw != nil && !ok {
		r.fail(tokensField, "must be an array of tables: write an [[api.tokens]] table for each client")
		return
	}
	var public, secret []string
	names, values := map[string]string{}, map[string]string{}
	for i, item := range list {
		key := fmt.Sprintf("%s[%d]", tokensField, i)
		tbl, ok := item.(map[string]any)
		if !ok {
			r.fail(key, "must be a table with name, token (or token_file) and channels")
			continue
		}
		t := table{r: r, key: key, tbl: map[string]any{}}
		var unknown []string
		for k, v := range tbl {
			if lk := strings.ToLower(k); slices.Contains(tokenKeys, lk) {
				t.tbl[lk] = v
			} else {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			r.fail(key, "has unknown key(s): %s (known: %s)", strings.Join(unknown, ", "), strings.Join(tokenKeys, ", "))
		}
		tok := APIToken{Name: t.str("name"), Token: t.str("token"), TokenFile: t.str("token_file"),
			Channels: t.strs("channels"), Agents: t.strs("agents"), MayApprove: t.boolean("may_approve", false),
			WebAdmin: t.boolean("web_admin", false)}
		switch {
		case tok.Name == "":
			t.fail("name", "is required: it names the client in the chat, the log and the audit trail")
		case !scheduleName.MatchString(tok.Name):
			t.fail("name", "= %q is not a name: up to 64 letters, digits, '.', '-' and '_'", tok.Name)
		case names[tok.Name] != "":
			t.fail("name", "= %q is the name of %s too", tok.Name, names[tok.Name])
		case tok.Name == EnvTokenName && r.env[EnvTokenVar] != "":
			t.fail("name", "= %q is the name of the client %s gives", tok.Name, EnvTokenVar)
		default:
			names[tok.Name] = key
		}
		switch {
		case tok.Token != "" && tok.TokenFile != "":
			t.fail("token_file", "and token are both set: give one")
		case tok.TokenFile != "":
			v, err := readSecretFile(tok.TokenFile)
			if err != nil {
				t.fail("token_file", "cannot be read: %v", err)
			}
			tok.Token = v
		case tok.Token == "":
			t.fail("token", "is required (or token_file): the bearer token the client presents")
		}
		checkToken(func(format string, args ...any) { t.fail("token", format, args...) }, tok.Token, key, values)
		if len(tok.Channels) == 0 && len(c.Chat.Platforms) > 0 {
			t.fail("channels", "is empty: list the channels it may start prompts in (\"ID\" or \"platform:ID\"), or [\"*\"] for every channel the bot serves")
		}
		for _, a := range tok.Agents {
			if a != "*" && c.Profiles[a] == nil {
				t.fail("agents", "has %q, which is not a profile: one of %s, or \"*\"", a, strings.Join(sortedKeys(c.Profiles), ", "))
			}
		}
		c.API.Tokens = append(c.API.Tokens, tok)
		public = append(public, fmt.Sprintf("%s: channels=%v agents=%v may_approve=%v web_admin=%v", tok.Name, tok.Channels, tok.Agents, tok.MayApprove, tok.WebAdmin))
		secret = append(secret, tok.Name+"="+tok.Token)
	}
	if v := r.env[EnvTokenVar]; v != "" {
		tok := APIToken{Name: EnvTokenName, Token: v, Channels: []string{"*"}, Agents: []string{"*"}, MayApprove: true}
		checkToken(func(format string, args ...any) { r.fail(EnvTokenVar, format, args...) }, tok.Token, EnvTokenVar, values)
		c.API.Tokens = append(c.API.Tokens, tok)
		public = append(public, fmt.Sprintf("%s (%s): channels=%v agents=%v may_approve=%v", tok.Name, EnvTokenVar, tok.Channels, tok.Agents, tok.MayApprove))
		secret = append(secret, tok.Name+"="+tok.Token)
	}
	r.vals[tokensField] = "[" + strings.Join(public, "; ") + "]"
	r.vals[tokensField+".secrets"] = strings.Join(secret, "; ")
}

// checkToken says through fail what makes token, the token of key, no
// secret to take: too short, not one word, one the project's examples
// publish, or the token of another client (values: the tokens taken so
// far, by key; token is added).
func checkToken(fail func(format string, args ...any), token, key string, values map[string]string) {
	switch {
	case token == "":
	case len(token) < minTokenLength:
		fail("is shorter than %d characters: use a long random one (openssl rand -hex 32)", minTokenLength)
	case strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		fail("has spaces or control characters, which a bearer token cannot carry")
	case slices.Contains(publishedTokens, token):
		fail("is the example token the broker's own documentation shows, which anyone may know: make one of your own (openssl rand -hex 32)")
	case values[token] != "":
		fail("is the token of %s too: each client needs its own", values[token])
	default:
		values[token] = key
	}
}

// Secrets are the configuration's secret values besides the agents'
// environments: the chat platforms' tokens and secrets, the cluster's
// password and the API's tokens, to be masked wherever text from outside
// is logged.
func (c *Config) Secrets() []string {
	var out []string
	for _, s := range []string{c.Discord.Token, c.Slack.BotToken, c.Slack.AppToken, c.Slack.SigningSecret, c.Cluster.Password} {
		if s != "" {
			out = append(out, s)
		}
	}
	for _, t := range c.API.Tokens {
		if t.Token != "" {
			out = append(out, t.Token)
		}
	}
	return out
}
