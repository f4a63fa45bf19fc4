package config

import (
	"net"
	"net/netip"
)

// sameListener reports whether listening on a and on b would take the
// same socket: the same port (not 0, which picks one), on the same host
// or with either on every address ("", 0.0.0.0, ::).
func sameListener(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	return ha == hb || anyHost(ha) || anyHost(hb)
}

func anyHost(h string) bool {
	ip, err := netip.ParseAddr(h)
	return h == "" || err == nil && ip.IsUnspecified()
}

// readWebListen reads web.listen: an address no other listener of the
// broker has.
func readWebListen(r *reader, k string, c *Config) {
	c.Web.Listen = r.address(k)
	if c.Web.Listen == "" {
		return
	}
	others := []struct{ key, addr string }{
		{"http.listen", c.HTTP.Listen},
		{"api.listen", c.API.Listen},
	}
	if r.v.GetString("slack.mode") == "http" {
		others = append(others, struct{ key, addr string }{"slack.listen", r.v.GetString("slack.listen")})
	}
	for _, o := range others {
		if o.addr != "" && sameListener(c.Web.Listen, o.addr) {
			r.fail(k, "= %q is %s's address too (%q): the web front end needs a listener of its own", c.Web.Listen, o.key, o.addr)
		}
	}
}

// readTrustedProxies reads web.trusted_proxies: the networks (CIDRs, or
// addresses alone) whose X-Forwarded-For the web front end believes.
func readTrustedProxies(r *reader, k string, c *Config) {
	c.Web.TrustedProxies = nil
	for _, s := range r.strs(k) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				r.fail(k, "has %q, which is neither a network (10.0.0.0/8, fd00::/8) nor an address", s)
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		c.Web.TrustedProxies = append(c.Web.TrustedProxies, p.Masked())
	}
}
