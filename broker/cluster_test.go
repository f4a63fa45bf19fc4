package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/acp"
	"acpbroker/cluster"
	"acpbroker/config"
	"acpbroker/internal/eventually"
	"acpbroker/internal/testcert"
	"acpbroker/pool"

	"github.com/nats-io/nkeys"
)

// clusterPassword is the cluster's password in these tests.
const clusterPassword = "broker-cluster-test"

// embeddedNATS starts a NATS server as cluster.embedded does, with opts
// over a password on a free loopback port, and returns its URL.
func embeddedNATS(t *testing.T, opts cluster.EmbeddedOptions) string {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	if opts.NKeys == nil {
		opts.User, opts.Password = "acp", clusterPassword
	}
	e, err := cluster.StartEmbedded(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e.URL()
}

// openHost opens an agent host of the fake agent with the TOML extra,
// stopped at the test's cleanup.
func openHost(t *testing.T, extra string) (*Host, error) {
	t.Helper()
	cfg, err := config.Load(writeConfigArgs(t, nil, extra), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := OpenHost(ctx, cfg, Options{Logger: testLog(t)})
	if err == nil {
		t.Cleanup(func() { h.Stop(context.Background()) })
	}
	return h, err
}

// host.labels, host.capacity and a profile's hosts are consumed: the
// profile's agents go only to the host its labels match, as many as
// that host's capacity, and the next waits for a host, saying so.
func TestCluster_LabelsCapacityAndProfileHostsPlaceAgents(t *testing.T) {
	url := embeddedNATS(t, cluster.EmbeddedOptions{})
	join := fmt.Sprintf("[cluster]\nurl = %q\nuser = \"acp\"\npassword = %q\n", url, clusterPassword)
	for _, h := range []struct{ name, labels string }{{"ha", `["zone=a"]`}, {"hb", `["zone=b", "gpu=yes"]`}} {
		if _, err := openHost(t, join+fmt.Sprintf("name = %q\n[host]\nlabels = %s\ncapacity = 2\n[agents.gpu]\n", h.name, h.labels)); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(writeConfigArgs(t, nil, join+"name = \"broker\"\n[pool]\nmax_sessions = 8\n[agents.gpu]\nhosts = [\"gpu=yes\"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	eventually.True(t, "both hosts known", func() bool { return len(b.Status().Hosts) == 2 })
	for _, h := range b.Status().Hosts {
		if h.Capacity != 2 || (h.Name == "hb") != (h.Labels["gpu"] == "yes") {
			t.Errorf("host %+v", h)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, th := range []string{"t1", "t2"} {
		a, err := b.pool.Acquire(ctx, th, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if a.Where != "hb" {
			t.Errorf("thread %s's agent went to %q, want hb, the host whose labels match", th, a.Where)
		}
		b.pool.Release(a, false)
	}
	waited := make(chan pool.Wait, 1)
	short, cancelShort := context.WithTimeoutCause(ctx, 1500*time.Millisecond, errors.New("no host had room"))
	defer cancelShort()
	_, err = b.pool.Acquire(short, "t3", "", func(w pool.Wait) { waited <- w })
	if err == nil || !strings.Contains(err.Error(), "no host had room") {
		t.Errorf("a third agent for hb (capacity 2): %v", err)
	}
	select {
	case w := <-waited:
		if w != pool.WaitHost {
			t.Errorf("the third thread waited for %v, want an agent host", w)
		}
	default:
		t.Error("the third thread was not told it waits for an agent host")
	}
}

// The credentials' keys are consumed: cluster.password_file,
// cluster.tls_ca, tls_cert and tls_key, and cluster.nkey_seed_file each
// let a host join, and each one wrong or missing keeps it out.
func TestCluster_CredentialKeysAreConsumed(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile, _ := testcert.Write(t, dir, "ca", nil, nil)
	_, _, srvCert, srvKey := testcert.Write(t, dir, "server", ca, caKey)
	_, _, cliCert, cliKey := testcert.Write(t, dir, "member", ca, caKey)
	_, _, otherCA, _ := testcert.Write(t, dir, "other-ca", nil, nil)
	pwFile, badPwFile := filepath.Join(dir, "password"), filepath.Join(dir, "bad-password")
	os.WriteFile(pwFile, []byte(clusterPassword+"\n"), 0o600)
	os.WriteFile(badPwFile, []byte("nope\n"), 0o600)
	tlsURL := strings.Replace(embeddedNATS(t, cluster.EmbeddedOptions{TLSCert: srvCert, TLSKey: srvKey, TLSCA: caFile}), "nats://", "tls://", 1)

	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	seedFile, otherSeedFile := filepath.Join(dir, "member.nk"), filepath.Join(dir, "other.nk")
	os.WriteFile(seedFile, seed, 0o600)
	os.WriteFile(otherSeedFile, otherSeed, 0o600)
	nkeyURL := embeddedNATS(t, cluster.EmbeddedOptions{NKeys: []string{pub}})

	tlsJoin := func(ca, cert, key, pw string) string {
		s := fmt.Sprintf("[cluster]\nurl = %q\nuser = \"acp\"\npassword_file = %q\ntls_ca = %q\n", tlsURL, pw, ca)
		if cert != "" {
			s += fmt.Sprintf("tls_cert = %q\ntls_key = %q\n", cert, key)
		}
		return s
	}
	for _, c := range []struct {
		name, extra string
		joins       bool
	}{
		{"password file, CA and certificate", tlsJoin(caFile, cliCert, cliKey, pwFile), true},
		{"a wrong password file", tlsJoin(caFile, cliCert, cliKey, badPwFile), false},
		{"another CA", tlsJoin(otherCA, cliCert, cliKey, pwFile), false},
		{"no certificate", tlsJoin(caFile, "", "", pwFile), false},
		{"its NKey", fmt.Sprintf("[cluster]\nurl = %q\nnkey_seed_file = %q\n", nkeyURL, seedFile), true},
		{"another NKey", fmt.Sprintf("[cluster]\nurl = %q\nnkey_seed_file = %q\n", nkeyURL, otherSeedFile), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := openHost(t, c.extra)
			if (err == nil) != c.joins {
				t.Errorf("joined: %v (%v), want %v", err == nil, err, c.joins)
			}
		})
	}
}

// The MCP servers an agent's session is given are those of the host's
// definition of the profile, not the broker's.
func TestCluster_TheHostsMCPServersAreGiven(t *testing.T) {
	url := embeddedNATS(t, cluster.EmbeddedOptions{})
	join := fmt.Sprintf("[cluster]\nurl = %q\nuser = \"acp\"\npassword = %q\n", url, clusterPassword)
	if _, err := openHost(t, join+"name = \"ha\"\n[[agent.mcp_servers]]\nname = \"host-tool\"\ncommand = \"/bin/true\"\n"); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(writeConfigArgs(t, nil, join+"name = \"broker\"\n[[agent.mcp_servers]]\nname = \"broker-tool\"\ncommand = \"/bin/false\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := b.pool.Acquire(ctx, "t1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.pool.Release(a, false)
	sub, err := a.Conn.Subscribe(a.SessionID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	call, err := a.Conn.Prompt(ctx, a.SessionID, []acp.ContentBlock{acp.TextBlock("mcp-servers")})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for done := false; !done; {
		select {
		case u := <-sub.Updates():
			if u.Content != nil {
				got.WriteString(u.Content.Text)
			}
		case <-call.Done():
			done = true
		case <-ctx.Done():
			t.Fatal("no answer")
		}
	}
	if s := got.String(); !strings.Contains(s, "host-tool") || strings.Contains(s, "broker-tool") {
		t.Fatalf("the session was given %s; want the host's host-tool only", s)
	}
}
