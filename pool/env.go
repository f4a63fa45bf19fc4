package pool

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"acpbroker/internal/envvar"
)

// inherited are the only variables an agent gets from the broker's own
// environment without being named in agent.env.
var inherited = []string{"PATH", "HOME", "USER", "LANG"}

// BuildEnv returns an agent's environment: PATH, HOME, USER and LANG from
// lookup, then extra, whose values may refer to lookup's variables as
// ${VAR} or $VAR. Secrets are neither copied nor expanded; naming one in
// extra is an error.
func BuildEnv(lookup func(string) (string, bool), extra map[string]string) ([]string, error) {
	return BuildEnvFor("agent.env", lookup, extra)
}

// BuildEnvFor is BuildEnv for extra read from configuration key key
// ("agents.NAME.env"): its errors name key.NAME of each entry at fault.
func BuildEnvFor(key string, lookup func(string) (string, bool), extra map[string]string) ([]string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	env := map[string]string{}
	for _, k := range inherited {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	var problems []string
	for k, v := range extra {
		if envvar.IsSecret(k) {
			problems = append(problems, fmt.Sprintf("%s.%s: the broker's own secrets are not passed to agents", key, k))
			continue
		}
		val, refused := envvar.Expand(v, lookup)
		for _, name := range refused {
			problems = append(problems, fmt.Sprintf("%s.%s: refers to ${%s}, a broker secret", key, k, name))
		}
		env[k] = val
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// mergeEnv is base with over's NAME=value entries added, replacing base's
// of the same name.
func mergeEnv(base, over []string) []string {
	if len(over) == 0 {
		return base
	}
	names := make(map[string]bool, len(over))
	for _, kv := range over {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, over...)
}
