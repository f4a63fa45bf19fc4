package config

import (
	"net"
	"net/url"
	"strings"
	"time"
)

// ClusterConfig is the [cluster] table: the NATS system that joins a
// broker to its agent hosts. Without URL (and without Embedded) the
// broker runs every agent itself.
type ClusterConfig struct {
	// URL is the NATS server's address, nats:// or tls://, or several
	// separated by commas.
	URL string
	// Name is this member's name in the cluster ("": the machine's host
	// name, found where the broker is wired).
	Name string
	// User and Password, or the NKey seed in NKeySeedFile, are the
	// credentials; PasswordFile is where Password was read from, if from
	// a file.
	User, Password, PasswordFile string
	NKeySeedFile                 string
	// TLSCA verifies the server; TLSCert and TLSKey are this member's
	// certificate, for servers that ask for one.
	TLSCA, TLSCert, TLSKey string
	// HostTimeout is how long an agent host may be silent before it is
	// taken as lost.
	HostTimeout time.Duration
	// Embedded starts a NATS server inside the broker, on Listen.
	Embedded bool
	Listen   string
}

// HostConfig is the [host] table, read by `broker host`: what this agent
// host tells the brokers it serves.
type HostConfig struct {
	// Labels are "key=value" entries a profile's hosts selectors match.
	Labels []string
	// Capacity is how many agents the host runs at most (pool.max_sessions
	// when not set).
	Capacity int
}

// Enabled reports whether agents run on agent hosts: a URL to join, or
// an embedded server that hosts join.
func (c ClusterConfig) Enabled() bool { return c.URL != "" || c.Embedded }

// clusterKeys are the keys of [cluster] and [host], in README order.
var clusterKeys = []key{
	{name: "cluster.url", def: "", doc: "the NATS server agent hosts and brokers meet at, `nats://host:4222` or `tls://host:4222` (several: comma separated); set, the broker runs agents on agent hosts (see Agent hosts); `\"\"`: every agent here",
		read: readClusterURL},
	{name: "cluster.name", def: "", shown: "the host name", doc: "this broker's or host's name in the cluster",
		read: func(r *reader, k string, c *Config) { c.Cluster.Name = r.str(k) }},
	{name: "cluster.user", def: "", doc: "the user name NATS knows this member by (with `cluster.password`)",
		read: func(r *reader, k string, c *Config) { c.Cluster.User = r.str(k) }},
	{name: "cluster.password", def: "", secret: true, shown: "", doc: "its password (better: `BROKER_CLUSTER_PASSWORD`, or `cluster.password_file`); an embedded server requires it of everyone who connects",
		read: func(r *reader, k string, c *Config) { c.Cluster.Password = r.str(k) }},
	{name: "cluster.password_file", def: "", secret: true, doc: "a file holding the password (e.g. a systemd credential)",
		read: func(r *reader, k string, c *Config) {
			r.secretFile(k, &c.Cluster.Password, &c.Cluster.PasswordFile)
		}},
	{name: "cluster.nkey_seed_file", def: "", secret: true, doc: "a file holding this member's NKey seed (`SU…`), instead of a user and password",
		read: func(r *reader, k string, c *Config) { c.Cluster.NKeySeedFile = r.str(k) }},
	{name: "cluster.tls_ca", def: "", doc: "the certificate authority the NATS server's certificate is checked against (`\"\"`: the system's)",
		read: func(r *reader, k string, c *Config) { c.Cluster.TLSCA = r.str(k) }},
	{name: "cluster.tls_cert", def: "", doc: "this member's certificate, for a server that asks for one (with `cluster.tls_key`)",
		read: func(r *reader, k string, c *Config) { c.Cluster.TLSCert = r.str(k) }},
	{name: "cluster.tls_key", def: "", doc: "the key of `cluster.tls_cert`",
		read: func(r *reader, k string, c *Config) { c.Cluster.TLSKey = r.str(k) }},
	{name: "cluster.host_timeout", def: "8s", doc: "an agent host silent this long is lost (it says it is alive every 2s): its threads are told, their next message starts on another host",
		read: func(r *reader, k string, c *Config) { c.Cluster.HostTimeout = r.dur(k, time.Second, 10*time.Minute) }},
	{name: "cluster.embedded", def: false, doc: "start a NATS server inside the broker, on `cluster.listen`, for the agent hosts to connect to",
		read: func(r *reader, k string, c *Config) { c.Cluster.Embedded = r.boolean(k) }},
	{name: "cluster.listen", def: "127.0.0.1:4222", doc: "with `cluster.embedded`: the embedded server's address (off loopback it requires `cluster.password`)",
		read: func(r *reader, k string, c *Config) { c.Cluster.Listen = r.address(k) }},
	{name: "host.labels", def: []string{}, doc: "`broker host`: `key=value` labels this host offers, which profiles' `hosts` select (e.g. `[\"gpu=a100\", \"zone=eu\"]`)",
		read: func(r *reader, k string, c *Config) { c.Host.Labels = r.labels(k) }},
	{name: "host.capacity", def: 0, shown: "`pool.max_sessions`", doc: "`broker host`: agents this host runs at most, which it advertises (`0`: `pool.max_sessions`)",
		read: func(r *reader, k string, c *Config) { c.Host.Capacity = r.integer(k, 0, 10000) }},
}

// readClusterURL reads cluster.url: NATS URLs, nats:// or tls://.
func readClusterURL(r *reader, k string, c *Config) {
	c.Cluster.URL = strings.TrimSpace(r.str(k))
	if c.Cluster.URL == "" {
		return
	}
	for one := range strings.SplitSeq(c.Cluster.URL, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
			r.fail(k, "= %q is not a NATS URL like nats://host:4222 or tls://host:4222", one)
			return
		}
		if u.User != nil {
			r.fail(k, "= %q carries credentials: set cluster.user and cluster.password (or BROKER_CLUSTER_PASSWORD) instead", u.Redacted())
		}
	}
}

// labels reads a list of "key=value" entries, each key once.
func (r *reader) labels(k string) []string {
	out := r.strs(k)
	seen := map[string]bool{}
	for _, kv := range out {
		name, val, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "" || val == "" || strings.ContainsAny(kv, " \t,"):
			r.fail(k, "has %q, which is not key=value (e.g. \"gpu=a100\")", kv)
		case seen[name]:
			r.fail(k, "has %q twice", name)
		}
		seen[name] = true
	}
	return out
}

// clusterNeeds checks what the cluster's keys need of each other, once
// every key and profile is read; it gives profiles that set no warm of
// their own pool.warm, and the host no capacity pool.max_sessions.
func (r *reader) clusterNeeds(c *Config) {
	cl := &c.Cluster
	if c.Host.Capacity == 0 {
		c.Host.Capacity = c.Pool.MaxSessions
	}
	for name, p := range c.Profiles {
		// [agent]'s warm = 0 is "none": pool.warm says it as well.
		if p.Warm == 0 && !r.v.IsSet("agents."+name+".warm") {
			p.Warm = c.Pool.Warm
		}
	}
	if cl.User != "" && cl.Password == "" {
		r.fail("cluster.password", "is required with cluster.user (or set BROKER_CLUSTER_PASSWORD, or cluster.password_file)")
	}
	if cl.Password != "" && cl.User == "" {
		r.fail("cluster.user", "is required with cluster.password: the user NATS knows this member by")
	}
	if (cl.TLSCert == "") != (cl.TLSKey == "") {
		if cl.TLSCert != "" {
			r.fail("cluster.tls_key", "is required with cluster.tls_cert: the certificate's key")
		} else {
			r.fail("cluster.tls_cert", "is required with cluster.tls_key: the certificate it is the key of")
		}
	}
	authenticated := cl.Password != "" || cl.NKeySeedFile != ""
	if cl.URL != "" && !authenticated {
		for one := range strings.SplitSeq(cl.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err == nil && !loopbackHost(u.Hostname()) {
				r.fail("cluster.url", "= %q is not on loopback and no credentials are set: an unauthenticated cluster is refused outside loopback; set cluster.user and cluster.password, or cluster.nkey_seed_file", one)
				break
			}
		}
	}
	if cl.Embedded && cl.Password == "" {
		if host, _, err := net.SplitHostPort(cl.Listen); err == nil && !loopbackHost(host) {
			r.fail("cluster.listen", "= %q is not on loopback and cluster.password is not set: the embedded server would let anyone who reaches it run agents; set cluster.user and cluster.password, or listen on 127.0.0.1", cl.Listen)
		}
	}
}

// loopbackHost reports whether host names this machine's loopback only:
// localhost, or a loopback address ("" and 0.0.0.0 are every address).
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
