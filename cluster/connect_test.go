package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

func TestConnect_RefusesNoCredentialsBeyondLoopback(t *testing.T) {
	for _, url := range []string{"nats://10.1.2.3:4222", "nats.example.org:4222", "nats://127.0.0.1:4222,nats://192.0.2.7:4222"} {
		start := time.Now()
		_, err := Connect(t.Context(), Options{URL: url})
		if err == nil || !strings.Contains(err.Error(), "cluster.user") || !strings.Contains(err.Error(), "cluster.nkey_seed_file") {
			t.Errorf("Connect(%s) without credentials = %v, want a refusal naming cluster.user and cluster.nkey_seed_file", url, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Connect(%s) took %s: the refusal should come before any dial", url, d)
		}
	}
	if _, err := Connect(t.Context(), Options{}); err == nil || !strings.Contains(err.Error(), "cluster.url") {
		t.Errorf("Connect without a URL = %v, want an error naming cluster.url", err)
	}
	if _, err := Connect(t.Context(), Options{URL: "nats://127.0.0.1:1", TLSCert: "c.pem"}); err == nil || !strings.Contains(err.Error(), "cluster.tls_key") {
		t.Errorf("a certificate without a key = %v, want an error naming cluster.tls_key", err)
	}
}

func TestConnect_LoopbackWithoutCredentials(t *testing.T) {
	ns := runNATS(t, 0, 0)
	nc := dial(t, ns.ClientURL())
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	// A failed join names the key.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ns.Shutdown()
	ns.WaitForShutdown()
	if _, err := Connect(ctx, Options{URL: ns.ClientURL(), ConnectTimeout: time.Second}); err == nil || !strings.HasPrefix(err.Error(), "cluster.url: ") {
		t.Fatalf("joining a server that is gone = %v, want an error naming cluster.url", err)
	}
}

func TestEmbedded_RequiresThePassword(t *testing.T) {
	e, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:0", User: "broker", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if nc, err := Connect(ctx, Options{URL: e.URL(), ConnectTimeout: time.Second}); err == nil {
		nc.Close()
		t.Fatal("the embedded server admitted a client without the password")
	}
	if nc, err := Connect(ctx, Options{URL: e.URL(), User: "broker", Password: "wrong", ConnectTimeout: time.Second}); err == nil {
		nc.Close()
		t.Fatal("the embedded server admitted a client with a wrong password")
	}
	nc, err := Connect(ctx, Options{URL: e.URL(), User: "broker", Password: "s3cret"})
	if err != nil {
		t.Fatalf("with the password: %v", err)
	}
	nc.Close()
}

func TestEmbedded_RefusesAnOpenServerBeyondLoopback(t *testing.T) {
	_, err := StartEmbedded(EmbeddedOptions{Listen: "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "cluster.user") {
		t.Fatalf("an open embedded server on every address = %v, want a refusal naming cluster.user", err)
	}
	if _, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1"}); err == nil || !strings.Contains(err.Error(), "cluster.listen") {
		t.Fatalf("a listen address without a port = %v, want an error naming cluster.listen", err)
	}
}

func TestEmbedded_AdmitsAnNKey(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "host.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:0", NKeys: []string{pub}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if nc, err := Connect(ctx, Options{URL: e.URL(), NKeySeedFile: otherFile, ConnectTimeout: time.Second}); err == nil {
		nc.Close()
		t.Fatal("the embedded server admitted an NKey it was not given")
	}
	nc, err := Connect(ctx, Options{URL: e.URL(), NKeySeedFile: seedFile})
	if err != nil {
		t.Fatalf("with the NKey: %v", err)
	}
	nc.Close()
	if _, err := Connect(ctx, Options{URL: e.URL(), NKeySeedFile: filepath.Join(t.TempDir(), "missing")}); err == nil || !strings.Contains(err.Error(), "cluster.nkey_seed_file") {
		t.Fatalf("a missing seed file = %v, want an error naming cluster.nkey_seed_file", err)
	}
}
