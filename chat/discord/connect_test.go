package discord

import (
	"context"
	"strings"
	"testing"
	"time"

	"acpbroker/chat"
	"acpbroker/internal/fakediscord"

	"github.com/rs/zerolog"
)

func newBareClient(t *testing.T, srv *fakediscord.Server, token string) *Client {
	t.Helper()
	c, err := New(Config{Token: token, APIURL: srv.APIURL(),
		Access: Access{AllowAllChannels: true}, Logger: zerolog.New(zerolog.NewTestWriter(t))}, &countingEngine{submits: map[string]int{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(time.Second) })
	return c
}

// A token Discord refuses is no passing failure: Run says so at once,
// for the operator to mend, instead of trying for ever. Discord refuses
// it when the bot identifies, closing the gateway with 4004.
func TestResilience_ARefusedTokenEndsRunAtOnce(t *testing.T) {
	srv := fakediscord.New(t, fakediscord.Options{Token: "bot-token"})
	c := newBareClient(t, srv, "not-the-token")
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "4004") {
			t.Fatalf("Run = %v, want the gateway's refusal (4004)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still tries a refused token after 10s")
	}
	if n := len(srv.RequestsTo(fakediscord.RouteGateway)); n != 1 {
		t.Errorf("the gateway was looked up %d times, want one try for a refused token", n)
	}
}

// While Discord keeps failing, stopping the broker ends the tries at
// once: the wait between them is abortable.
func TestResilience_StoppingEndsTheTriesToConnect(t *testing.T) {
	srv := fakediscord.New(t, fakediscord.Options{Token: "bot-token"})
	srv.InjectError(fakediscord.OnRoute(fakediscord.RouteGateway), 1000, 503)
	c := newBareClient(t, srv, "bot-token")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// The second try comes after chat.ConnectRetryFirst; cancel while the
	// third is awaited (2s after the second).
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.RequestsTo(fakediscord.RouteGateway)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no second try to connect within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil: stopping is no failure", err)
		}
		if took := time.Since(start); took > chat.ConnectRetryFirst {
			t.Errorf("Run ended %v after the stop, want it at once (well under the %v wait)", took, 2*chat.ConnectRetryFirst)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits to connect 10s after the stop")
	}
}
