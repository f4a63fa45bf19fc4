package config

import (
	"fmt"
	"net"
)

// exposureWarnings say what a valid configuration leaves open to others
// on the network: the API's bearer tokens over plain HTTP beyond
// loopback. (What it leaves open on the machine, files and users, is
// warned of where the broker is wired.)
func exposureWarnings(c *Config) []string {
	var out []string
	if c.API.Listen != "" && !loopback(c.API.Listen) {
		out = append(out, fmt.Sprintf("api.listen = %q is beyond loopback, and the API speaks plain HTTP: its clients' bearer tokens and prompts cross the network readable; "+
			"keep it on loopback (127.0.0.1:PORT) and put a TLS proxy in front for remote clients", c.API.Listen))
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
