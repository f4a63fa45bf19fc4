package config

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
)

// exposureWarnings say what a valid configuration leaves open to others
// on the machine or the network: the API's bearer tokens over plain
// HTTP beyond loopback, a file a secret is read from that every user
// may read, and agents run as "nobody", a user other services share.
func exposureWarnings(c *Config) []string {
	var out []string
	if c.API.Listen != "" && !loopback(c.API.Listen) {
		out = append(out, fmt.Sprintf("api.listen = %q is beyond loopback, and the API speaks plain HTTP: its clients' bearer tokens and prompts cross the network readable; "+
			"keep it on loopback (127.0.0.1:PORT) and put a TLS proxy in front for remote clients", c.API.Listen))
	}
	for _, b := range brokerPaths(c) {
		if b.near || b.what == "state.dir" || b.what == "the configuration file" {
			continue
		}
		if fi, err := os.Stat(b.path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			out = append(out, fmt.Sprintf("%s = %q is readable by every user of the machine (mode %04o): make it the broker's alone (chmod 0600, or 0640 for its group)",
				b.what, b.path, fi.Mode().Perm()))
		}
	}
	if c.Agent.RunAs != nil && sharedUser(c.values["agent.run_as_user"], c.Agent.RunAs.Uid) {
		out = append(out, fmt.Sprintf("agent.run_as_user = %q is a user other services run as too: any of them can read its agents' /proc/PID/environ (their API keys) and signal them; "+
			"make a user for the agents alone (useradd --system --no-create-home --shell /usr/sbin/nologin acp-agent) and name it", c.values["agent.run_as_user"]))
	}
	return out
}

// loopback reports whether the address listen (host:port) is on a
// loopback interface alone: a loopback IP or "localhost"; an empty host
// is every interface.
func loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sharedUser reports whether the user named name (uid) is nobody,
// which the system gives to whatever needs no user of its own.
func sharedUser(name string, uid uint32) bool {
	if name == "nobody" {
		return true
	}
	u, err := user.Lookup("nobody")
	return err == nil && u.Uid == strconv.FormatUint(uint64(uid), 10)
}
