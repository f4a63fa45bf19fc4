package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Without [cluster] every agent runs here; [cluster] and [host] read as
// written, with their defaults where nothing is.
func TestCluster_KeysReadAsWrittenWithTheirDefaults(t *testing.T) {
	c, err := loadText(t, agentTable())
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Cluster
	if cl.Enabled() || cl.URL != "" || cl.HostTimeout != 8*time.Second || cl.Listen != "127.0.0.1:4222" || cl.Embedded {
		t.Fatalf("defaults: %+v", cl)
	}
	if c.Host.Capacity != c.Pool.MaxSessions || len(c.Host.Labels) != 0 {
		t.Fatalf("host defaults: %+v, pool.max_sessions %d", c.Host, c.Pool.MaxSessions)
	}
	pw := filepath.Join(t.TempDir(), "password")
	os.WriteFile(pw, []byte("from-a-file\n"), 0o600)
	c, err = loadText(t, agentTable()+`
[pool]
max_sessions = 6
[cluster]
url = "tls://nats.example.com:4222, tls://nats2.example.com:4222"
name = "broker-eu"
user = "broker"
password_file = "`+pw+`"
tls_ca = "/etc/broker/ca.pem"
host_timeout = "4s"
[host]
labels = ["gpu=a100", "zone=eu"]
`)
	if err != nil {
		t.Fatal(err)
	}
	cl = c.Cluster
	if !cl.Enabled() || cl.URL != "tls://nats.example.com:4222, tls://nats2.example.com:4222" || cl.Name != "broker-eu" || cl.User != "broker" ||
		cl.Password != "from-a-file" || cl.PasswordFile != pw || cl.TLSCA != "/etc/broker/ca.pem" || cl.HostTimeout != 4*time.Second {
		t.Fatalf("cluster: %+v", cl)
	}
	if !slices.Equal(c.Host.Labels, []string{"gpu=a100", "zone=eu"}) || c.Host.Capacity != 6 {
		t.Fatalf("host: %+v", c.Host)
	}
	if !slices.Contains(c.Secrets(), "from-a-file") {
		t.Fatal("the cluster's password is not among the secrets masked")
	}
	if !secretKey("cluster.password") || !secretKey("cluster.password_file") {
		t.Fatal("cluster.password is logged")
	}
	c, err = loadText(t, agentTable()+"[cluster]\nembedded = true\n", "BROKER_CLUSTER_PASSWORD=from-the-env", "BROKER_CLUSTER_USER=host")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Cluster.Enabled() || c.Cluster.Password != "from-the-env" {
		t.Fatalf("embedded, password from the environment: %+v", c.Cluster)
	}
}

// A profile's hosts and warm read as written; warm is pool.warm for a
// profile that sets none, and agents.NAME.warm = 0 is none.
func TestCluster_ProfilesHostsAndWarm(t *testing.T) {
	c, err := loadText(t, `
[pool]
warm = 2
[agent]
command = "`+fakeAgent+`"
[agents.gpu]
hosts = ["gpu=a100"]
warm = 1
[agents.plain]
[agents.cold]
warm = 0
[agents]
default = "plain"
`)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Profiles
	if !slices.Equal(p["gpu"].Hosts, []string{"gpu=a100"}) || len(p["plain"].Hosts) != 0 {
		t.Fatalf("hosts: gpu %v, plain %v", p["gpu"].Hosts, p["plain"].Hosts)
	}
	if p["gpu"].Warm != 1 || p["plain"].Warm != 2 || p["cold"].Warm != 0 {
		t.Fatalf("warm: gpu %d (want 1), plain %d (want pool.warm, 2), cold %d (want 0)", p["gpu"].Warm, p["plain"].Warm, p["cold"].Warm)
	}
	c, err = loadText(t, "[pool]\nwarm = 3\n[agent]\ncommand = \""+fakeAgent+"\"\nwarm = 1\n")
	if err != nil || c.Profiles["default"].Warm != 1 {
		t.Fatalf("agent.warm over pool.warm: %v", err)
	}
}

// Each bad [cluster], [host] or profile value is an error naming its key
// and saying why.
func TestCluster_BadValuesAreErrorsNamingTheKey(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[cluster]\nurl = \"http://nats.example.com:4222\"\n", `cluster.url = "http://nats.example.com:4222" is not a NATS URL like nats://host:4222 or tls://host:4222`},
		{"[cluster]\nurl = \"nats://127.0.0.1:4222,localhost\"\n", `cluster.url = "localhost" is not a NATS URL`},
		{"[cluster]\nurl = \"nats://u:secret@127.0.0.1:4222\"\n", `cluster.url = "nats://u:xxxxx@127.0.0.1:4222" carries credentials`},
		{"[cluster]\nurl = \"nats://nats.example.com:4222\"\n", `cluster.url = "nats://nats.example.com:4222" is not on loopback and no credentials are set: an unauthenticated cluster is refused outside loopback`},
		{"[cluster]\nurl = \"nats://127.0.0.1:4222,nats://10.1.2.3:4222\"\n", `cluster.url = "nats://10.1.2.3:4222" is not on loopback`},
		{"[cluster]\nurl = \"nats://nats.example.com:4222\"\nuser = \"broker\"\n", `cluster.password is required with cluster.user`},
		{"[cluster]\nurl = \"nats://127.0.0.1:4222\"\npassword = \"pw\"\n", `cluster.user is required with cluster.password`},
		{"[cluster]\nembedded = true\nlisten = \"0.0.0.0:4222\"\n", `cluster.listen = "0.0.0.0:4222" is not on loopback and cluster.password is not set`},
		{"[cluster]\nembedded = true\nlisten = \"4222\"\n", `cluster.listen = "4222" is not a host:port address`},
		{"[cluster]\ntls_cert = \"/etc/c.pem\"\n", `cluster.tls_key is required with cluster.tls_cert`},
		{"[cluster]\ntls_key = \"/etc/k.pem\"\n", `cluster.tls_cert is required with cluster.tls_key`},
		{"[cluster]\nhost_timeout = \"10ms\"\n", `cluster.host_timeout = 10ms is out of range`},
		{"[host]\nlabels = [\"gpu\"]\n", `host.labels has "gpu", which is not key=value`},
		{"[host]\nlabels = [\"zone=eu\", \"zone=us\"]\n", `host.labels has "zone" twice`},
		{"[host]\ncapacity = -1\n", `host.capacity = -1 is out of range [0, 10000]`},
		{"[pool]\nwarm = -1\n", `pool.warm = -1 is out of range [0, 10000]`},
		{"[agents.a]\nhosts = [\"=x\"]\n", `agents.a.hosts has "=x", which is not key=value`},
		{"[agents.a]\nwarm = -2\n", `agents.a.warm = -2 is out of range [0, 10000]`},
	} {
		_, err := loadText(t, agentTable()+tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant an error with: %s", tc.text, err, tc.want)
		}
	}
	for _, ok := range []string{
		"[cluster]\nurl = \"nats://127.0.0.1:4222\"\n",
		"[cluster]\nurl = \"nats://localhost:4222\"\n",
		"[cluster]\nurl = \"nats://nats.example.com:4222\"\nnkey_seed_file = \"/etc/broker/nkey\"\n",
		"[cluster]\nurl = \"tls://nats.example.com:4222\"\nuser = \"u\"\npassword = \"pw\"\ntls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n",
		"[cluster]\nembedded = true\nlisten = \"0.0.0.0:4222\"\nuser = \"u\"\npassword = \"pw\"\n",
	} {
		if _, err := loadText(t, agentTable()+ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
