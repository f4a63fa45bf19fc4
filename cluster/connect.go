// Package cluster carries agents between a broker and the agent hosts that
// run them, over NATS: hosts advertise themselves with a beat, the broker
// places each new agent on one, and the agent's stdin, stdout, files and
// terminals travel as NATS messages that survive a server restart.
//
// A broker joins with Connect (or StartEmbedded, then Connect to its URL),
// makes a Client, and gives the pool Client.Start as its Config.Remote:
//
//	c := cluster.NewClient(nc, cluster.ClientOptions{Broker: name, HostTimeout: timeout})
//	cfg.Remote = func(ctx context.Context, thread string, prof *pool.Profile, onWait func()) (pool.Remote, error) {
//		return c.Start(ctx, thread, prof.Name, hosts[prof.Name], onWait) // the profile's hosts selector
//	}
//
// An agent host joins the same way and calls Serve with a Starter that
// starts the agents of its own profiles (pool.Pool.Bare, whose
// ReleaseBare is the Started's Release).
//
// On the wire, all under "acpbroker.": hosts beat on beat.host (name,
// instance, labels, profiles, capacity, agents, memory) and answer
// hosts.ask with a beat at once; brokers beat on beat.broker. A start is a
// request to host.INSTANCE.start naming the agent's id, chosen by the
// broker. An agent's stdout is agent.ID.out (acknowledged on
// agent.ID.outack), its stdin agent.ID.in (agent.ID.inack), and every other
// request about it (stop, kill, alive, fs/*, terminal/*, release) goes to
// agent.ID.ctl.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Options say how to join a NATS system. The field names follow the
// [cluster] keys they come from.
type Options struct {
	// URL is cluster.url: one NATS URL, or several separated by commas.
	URL string
	// Name is cluster.name, shown by the server for this connection.
	Name string
	// User and Password are cluster.user and cluster.password.
	User, Password string
	// NKeySeedFile is cluster.nkey_seed_file: a file holding an NKey seed.
	NKeySeedFile string
	// TLSCA, TLSCert and TLSKey are cluster.tls_ca, cluster.tls_cert and
	// cluster.tls_key: the CA the server's certificate is checked against,
	// and this member's client certificate and key.
	TLSCA, TLSCert, TLSKey string
	// ConnectTimeout bounds each dial; 5 s when zero.
	ConnectTimeout time.Duration
	// StaleAfter is how long the connection may go without the server
	// answering its pings before it is dropped and dialed afresh; 8 s
	// when zero. Without it a connection cut by a silent partition (a
	// switch down: packets dropped, nothing refused) is left to TCP, which
	// backs off its retransmissions while nothing comes back and so, once
	// the partition heals, stays silent for as long again, up to minutes.
	StaleAfter time.Duration
	Logger     zerolog.Logger
}

// reconnectBuf bounds what a connection keeps while it reconnects; what
// does not fit is resent by the streams once the connection is back.
const reconnectBuf = 8 << 20

// Connect joins the NATS system o names and keeps reconnecting for as long
// as the connection is open. A URL naming a host that is not a loopback
// address is refused without credentials (a user or an NKey), because an
// open NATS system would let anyone start agents. The errors name the key
// at fault. ctx bounds the first connection only.
func Connect(ctx context.Context, o Options) (*nats.Conn, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("cluster.url: not set")
	}
	loop, err := loopbackOnly(o.URL)
	if err != nil {
		return nil, err
	}
	if !loop && o.User == "" && o.NKeySeedFile == "" {
		return nil, fmt.Errorf("cluster.url: %s is not a loopback address, and a cluster is not joined without credentials: set cluster.user (and cluster.password) or cluster.nkey_seed_file", o.URL)
	}
	if o.Password != "" && o.User == "" {
		return nil, errors.New("cluster.password: set without cluster.user")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("cluster.tls_cert and cluster.tls_key: set both or neither")
	}
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	stale := o.StaleAfter
	if stale <= 0 {
		stale = 8 * time.Second
	}
	log := o.Logger
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.Timeout(timeout),
		// A ping every quarter of stale, and the connection dropped when a
		// fourth finds three unanswered: about stale of silence.
		nats.PingInterval(stale / 4),
		nats.MaxPingsOutstanding(3),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(reconnectBuf),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn().Err(err).Msg("cluster: disconnected from NATS; reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("cluster: reconnected to NATS")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("cluster: NATS error")
		}),
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("cluster.nkey_seed_file: %w", err)
		}
		opts = append(opts, opt)
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(o.URL, opts...)
		ch <- result{nc, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("cluster.url: joining %s: %w", o.URL, r.err)
		}
		return r.nc, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("cluster.url: joining %s: %w", o.URL, context.Cause(ctx))
	}
}

// loopbackOnly reports whether every server the URL list names is on a
// loopback address (or "localhost").
func loopbackOnly(list string) (bool, error) {
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		if !strings.Contains(raw, "://") {
			raw = "nats://" + raw
		}
		u, err := url.Parse(raw)
		if err != nil {
			return false, fmt.Errorf("cluster.url: %q: %w", raw, err)
		}
		if u.User != nil {
			return false, fmt.Errorf("cluster.url: %q carries credentials; set cluster.user and cluster.password instead", u.Redacted())
		}
		h := u.Hostname()
		if h == "" {
			return false, fmt.Errorf("cluster.url: %q names no host", raw)
		}
		if h == "localhost" {
			continue
		}
		ip := net.ParseIP(h)
		if ip == nil || !ip.IsLoopback() {
			return false, nil
		}
	}
	return true, nil
}
