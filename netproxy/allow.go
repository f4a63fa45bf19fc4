package netproxy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultAllow is agent.allow_hosts's default: the model providers of the
// agents we know (Anthropic, with the host Claude Code refreshes its
// sign-in at; OpenAI and Codex, with Codex's sign-in host and ChatGPT's
// backend; Google Gemini, with Gemini CLI's Code Assist and token hosts)
// on 443 and nothing else.
var DefaultAllow = []string{
	"api.anthropic.com:443",
	"console.anthropic.com:443",
	"api.openai.com:443",
	"auth.openai.com:443",
	"chatgpt.com:443",
	"generativelanguage.googleapis.com:443",
	"cloudcode-pa.googleapis.com:443",
	"oauth2.googleapis.com:443",
}

// defaultPorts are the ports an entry without a port allows.
var defaultPorts = []int{443, 80}

// Allow is a parsed allow list (immutable, safe for concurrent use). The
// zero Allow permits nothing.
type Allow struct {
	rules []rule
}

// rule is one entry of an allow list.
type rule struct {
	// name is a host name, lower case without a trailing dot; for a
	// wildcard entry ("*.example.com") it is the part after "*.".
	name     string
	wildcard bool
	// addr is an IP address entry's address (unmapped); name is then "".
	addr  netip.Addr
	ports []int
}

// ParseAllow reads agent.allow_hosts entries. An entry is a host pattern
// with an optional port: "api.anthropic.com", "*.googleapis.com" (any
// subdomain, not the apex), "example.com:8443", "10.0.0.5:5432",
// "[::1]:8080", "127.0.0.2:40123". Without a port an entry allows 443 and
// 80. An IP address entry must name a port. "*" alone is refused (use
// agent.network = "host"). Errors name the entry and say what is wrong.
// Names compare case-insensitively, a trailing dot ignored.
//
// A name entry lets the proxy dial only the public addresses the name
// resolves to: one that resolves to a loopback, link-local, private or
// otherwise inner address is refused unless an address entry names that
// address and port too ("localhost:8080" needs "127.0.0.1:8080" beside
// it).
func ParseAllow(entries []string) (Allow, error) {
	var a Allow
	for _, e := range entries {
		r, err := parseRule(e)
		if err != nil {
			return Allow{}, fmt.Errorf("allow entry %q: %w", e, err)
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

func parseRule(e string) (rule, error) {
	s := strings.TrimSpace(e)
	if s == "" {
		return rule{}, fmt.Errorf("is empty")
	}
	if s == "*" || strings.HasPrefix(s, "*:") {
		return rule{}, fmt.Errorf(`"*" would allow every host: use agent.network = "host" instead`)
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@") {
		return rule{}, fmt.Errorf("is not a host with an optional port (no scheme, path or user)")
	}
	host, ports := s, []int(nil)
	switch {
	case strings.HasPrefix(s, "["):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			if !strings.Contains(s, "]:") {
				return rule{}, fmt.Errorf("an IP address entry must name a port, as in [::1]:8080")
			}
			return rule{}, fmt.Errorf("is not [address]:port: %v", err)
		}
		port, err := parsePort(p)
		if err != nil {
			return rule{}, err
		}
		host, ports = h, []int{port}
	case strings.Count(s, ":") == 1:
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return rule{}, fmt.Errorf("is not host:port: %v", err)
		}
		port, err := parsePort(p)
		if err != nil {
			return rule{}, err
		}
		host, ports = h, []int{port}
	case strings.Count(s, ":") > 1:
		if _, err := netip.ParseAddr(s); err == nil {
			return rule{}, fmt.Errorf("an IP address entry must name a port, as in [%s]:443", s)
		}
		return rule{}, fmt.Errorf("is not a host with an optional port (an IPv6 address is written [address]:port)")
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if ports == nil {
			return rule{}, fmt.Errorf("an IP address entry must name a port, as in %s", net.JoinHostPort(host, "443"))
		}
		if addr.Zone() != "" {
			return rule{}, fmt.Errorf("an IP address entry may not name a zone")
		}
		return rule{addr: addr.Unmap(), ports: ports}, nil
	}
	if ports == nil {
		ports = defaultPorts
	}
	name := normalName(host)
	wildcard := false
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		wildcard, name = true, rest
		if !strings.Contains(name, ".") {
			return rule{}, fmt.Errorf("a wildcard must stand under a domain of at least two labels (as *.example.com), not a top-level domain")
		}
	}
	if err := checkName(name); err != nil {
		return rule{}, err
	}
	return rule{name: name, wildcard: wildcard, ports: ports}, nil
}

func parsePort(p string) (int, error) {
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return port, nil
}

// checkName says what is wrong with a host name (lower case, without a
// trailing dot), if anything.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("names no host")
	}
	if len(name) > 253 {
		return fmt.Errorf("host name is longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" {
			return fmt.Errorf("host name has an empty label")
		}
		if len(label) > 63 {
			return fmt.Errorf("host name has a label longer than 63 characters")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("host name label %q begins or ends with a hyphen", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				if c == '*' {
					return fmt.Errorf(`"*" may only stand as the first label, as in *.example.com`)
				}
				return fmt.Errorf("host name has %q, not a letter, digit, hyphen or underscore", c)
			}
		}
	}
	return nil
}

// normalName is host as compared: lower case, without a trailing dot.
func normalName(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// Permits reports whether the allow list names host:port (before any
// resolution). host is a name or an IP address (an IPv6 one with or
// without brackets); a name matches an entry case-insensitively, a
// trailing dot ignored; an address matches only an address entry.
func (a Allow) Permits(host string, port int) bool {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if addr, err := netip.ParseAddr(h); err == nil {
		return a.permitsAddr(addr, port)
	}
	name := normalName(host)
	for _, r := range a.rules {
		if r.name == "" || !hasPort(r.ports, port) {
			continue
		}
		if r.wildcard {
			if strings.HasSuffix(name, "."+r.name) {
				return true
			}
		} else if name == r.name {
			return true
		}
	}
	return false
}

// permitsAddr reports whether an address entry names addr:port exactly.
func (a Allow) permitsAddr(addr netip.Addr, port int) bool {
	addr = addr.Unmap().WithZone("")
	for _, r := range a.rules {
		if r.name == "" && r.addr == addr && hasPort(r.ports, port) {
			return true
		}
	}
	return false
}

func hasPort(ports []int, port int) bool {
	for _, p := range ports {
		if p == port {
			return true
		}
	}
	return false
}
