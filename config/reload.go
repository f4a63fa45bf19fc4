package config

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Live is the configuration a running broker goes on with once it reloads
// next: running's, with the live keys read again from next by their own
// entries of the key table, and next's profiles, default profile and
// channels. Every other key stays as the broker was started with. next
// must come from Load.
func Live(running, next *Config) *Config {
	live := *running
	for _, k := range keys {
		if k.live {
			k.read(next.read, k.name, &live)
		}
	}
	live.values = map[string]string{}
	for k, v := range running.values {
		if !profileChange(k) {
			live.values[k] = v
		}
		if slices.Contains(liveKeys, k) {
			live.values[k] = next.values[k]
		}
	}
	for k, v := range next.values {
		if profileChange(k) {
			live.values[k] = v
		}
	}
	live.Profiles, live.DefaultProfile, live.Channels = next.Profiles, next.DefaultProfile, next.Channels
	live.Schedules, live.API.Tokens = next.Schedules, next.API.Tokens
	return &live
}

// Diff lists how next differs from running, as "key: old -> new" (a
// secret key by its name alone, the rest through mask, which hides the
// secret values known): those a reload applies at once, and those that
// need a restart.
func Diff(running, next *Config, mask func(string) string) (applied, restart []string) {
	all := map[string]bool{}
	for k := range next.values {
		all[k] = true
	}
	for k := range running.values {
		all[k] = true // a key gone (a profile removed) is a change too
	}
	for k := range all {
		v, old := next.values[k], running.values[k]
		if v == old {
			continue
		}
		desc := k
		if !secretKey(k) {
			desc = mask(fmt.Sprintf("%s: %s -> %s", k, old, v))
		}
		if slices.Contains(liveKeys, k) || profileChange(k) {
			applied = append(applied, desc)
		} else {
			restart = append(restart, desc)
		}
	}
	sort.Strings(applied)
	sort.Strings(restart)
	return applied, restart
}

// profileChange reports whether key belongs to what a reload takes whole
// from the new configuration: the profiles (for agents started from
// then on), the channels' profiles, the schedules and the API's tokens.
func profileChange(key string) bool {
	if strings.HasPrefix(key, "channels.") || arrayOfTables(key) {
		return true
	}
	_, field, ok := profileField(key)
	return ok && (knownProfileKey(field) || strings.HasPrefix(field, mcpServersField) || field == permissionsField)
}

// ProfileKey names a profile's key for errors: agents.NAME.field, or
// agent.field for the one profile of [agent].
func (c *Config) ProfileKey(p *Profile, field string) string {
	if _, ok := c.Profiles[DefaultProfileName]; ok && len(c.Profiles) == 1 && p.Name == DefaultProfileName {
		return "agent." + field
	}
	return "agents." + p.Name + "." + field
}

// Written reports whether key was given a value, in the file or the
// environment (a profile's key: in its own section).
func (c *Config) Written(key string) bool {
	_, ok := c.values[key]
	return ok
}
