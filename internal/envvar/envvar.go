// Package envvar says which of the broker's environment variables are
// its secrets, and expands variables in the values of agent.env and of
// MCP servers' settings without ever expanding a secret. Both the
// configuration (which checks those values when it reads them) and the
// pool (which builds an agent's environment) use it.
package envvar

import (
	"os"
	"strings"
)

// IsSecret reports whether a broker variable must never reach an agent:
// the broker's own settings (which hold the Discord token) and systemd's
// notification socket and watchdog settings.
func IsSecret(name string) bool {
	return strings.HasPrefix(name, "BROKER_") || strings.HasPrefix(name, "WATCHDOG_") ||
		name == "NOTIFY_SOCKET" || name == "DISCORD_TOKEN"
}

// Expand substitutes lookup's variables for ${VAR} and $VAR in s, as in
// agent.env values. A broker secret (IsSecret) is not expanded: it becomes
// nothing and is named in refused.
func Expand(s string, lookup func(string) (string, bool)) (out string, refused []string) {
	out = os.Expand(s, func(name string) string {
		if IsSecret(name) {
			refused = append(refused, name)
			return ""
		}
		val, _ := lookup(name)
		return val
	})
	return out, refused
}
