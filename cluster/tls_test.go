package cluster

import (
	"context"
	"testing"
	"time"

	"acpbroker/internal/testcert"
)

// The embedded server speaks TLS with the certificate it is given and
// asks clients for theirs; Connect checks the server against cluster.tls_ca
// and presents cluster.tls_cert.
func TestTLS_EmbeddedAndConnect(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caFile, _ := testcert.Write(t, dir, "ca", nil, nil)
	_, _, srvCert, srvKey := testcert.Write(t, dir, "server", ca, caKey)
	_, _, cliCert, cliKey := testcert.Write(t, dir, "client", ca, caKey)
	e, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:0", TLSCert: srvCert, TLSKey: srvKey, TLSCA: caFile})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if nc, err := Connect(ctx, Options{URL: e.URL(), TLSCA: caFile, ConnectTimeout: time.Second}); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate was admitted")
	}
	nc, err := Connect(ctx, Options{URL: e.URL(), TLSCA: caFile, TLSCert: cliCert, TLSKey: cliKey})
	if err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Fatal("the connection is not TLS")
	}
}
