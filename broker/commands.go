package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"acpbroker/acp"
	"acpbroker/config"
)

// findCommands makes each program the configuration names an absolute
// path, looked up as the broker would start it: each profile's agent
// (command), its stdio MCP servers' commands and, with agent.sandbox =
// "launcher", the launcher. A name with a slash is taken relative to the
// broker's working directory (not the agent's), a bare name is looked up
// on the broker's PATH; it must be an executable file. Each problem names
// the key where the program is written, once.
func findCommands(cfg *config.Config, environ []string) error {
	path, _ := envLookup(environ)("PATH")
	var problems []error
	said := map[string]bool{}
	fail := func(key string, err error) {
		if e := fmt.Errorf("%s %w", key, err); !said[e.Error()] {
			said[e.Error()] = true
			problems = append(problems, e)
		}
	}
	written := func(name, field string) string {
		if k := "agents." + name + "." + field; name != "" && cfg.Written(k) {
			return k
		}
		return "agent." + field
	}
	profiles := []*config.Profile{&cfg.Agent.Profile} // [agent], whose name is ""
	for _, name := range sortedKeys(cfg.Profiles) {
		profiles = append(profiles, cfg.Profiles[name])
	}
	for _, p := range profiles {
		name := p.Name
		if p.Command == "" {
			continue // [agent] need not name one when each profile does
		}
		if found, err := findCommand(p.Command, path); err != nil {
			fail(written(name, "command"), err)
		} else {
			p.Command = found
		}
		servers := make([]acp.MCPServer, len(p.MCPServers))
		copy(servers, p.MCPServers) // [agent]'s list is shared by the profiles that take it
		for i, s := range servers {
			if s.Transport() != acp.MCPStdio || s.Command == "" {
				continue
			}
			if found, err := findCommand(s.Command, path); err != nil {
				fail(fmt.Sprintf("%s[%d].command", written(name, "mcp_servers"), i), err)
			} else {
				servers[i].Command = found
			}
		}
		p.MCPServers = servers
	}
	if cfg.Agent.Sandbox == "launcher" && len(cfg.Agent.Launcher) > 0 {
		if found, err := findCommand(cfg.Agent.Launcher[0], path); err != nil {
			fail("agent.launcher", err)
		} else {
			cfg.Agent.Launcher[0] = found
		}
	}
	return errors.Join(problems...)
}

// findCommand is cmd as an absolute path to an executable file: with a
// slash, from the working directory; without, the first on path.
func findCommand(cmd, path string) (string, error) {
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
