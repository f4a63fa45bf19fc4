package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// EmbeddedOptions configure the NATS server a broker runs inside itself
// (cluster.embedded) for hosts to connect to.
type EmbeddedOptions struct {
	// Listen is cluster.listen, host:port; 127.0.0.1:4222 when empty. Port
	// 0 picks a free one (URL says which).
	Listen string
	// User and Password admit a client that presents them.
	User, Password string
	// NKeys admits clients that sign with these public NKeys.
	NKeys []string
	// TLSCert and TLSKey make the server speak TLS, TLSCA checks the
	// clients' certificates.
	TLSCert, TLSKey, TLSCA string
	// ReadyTimeout bounds the wait for the server to accept connections;
	// 10 s when zero.
	ReadyTimeout time.Duration
	Logger       zerolog.Logger
}

// Embedded is a NATS server running in this process.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a NATS server and returns once it accepts
// connections. A server listening beyond loopback requires a user and
// password or NKeys; without them it is refused.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("cluster.listen: %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("cluster.listen: %q: the port is not a number from 0 to 65535", listen)
	}
	if port == 0 {
		port = -1 // nats-server's "any free port"
	}
	ip := net.ParseIP(host)
	loop := host == "localhost" || (ip != nil && ip.IsLoopback())
	auth := o.User != "" || len(o.NKeys) > 0
	if !loop && !auth {
		return nil, fmt.Errorf("cluster.listen: %s is beyond loopback, and an embedded server there needs cluster.user and cluster.password (or NKeys)", listen)
	}
	if o.User != "" && o.Password == "" {
		return nil, errors.New("cluster.password: cluster.user is set without a password")
	}
	opts := &server.Options{
		Host:   host,
		Port:   port,
		NoLog:  true,
		NoSigs: true,
		// The streams keep their messages well below this.
		MaxPayload: 1 << 20,
	}
	if o.User != "" {
		opts.Users = []*server.User{{Username: o.User, Password: o.Password}}
	}
	for _, k := range o.NKeys {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: k})
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: o.TLSCert, KeyFile: o.TLSKey, CaFile: o.TLSCA, Verify: o.TLSCA != ""})
		if err != nil {
			return nil, fmt.Errorf("cluster.tls_cert: %w", err)
		}
		opts.TLSConfig = tc
		opts.TLS = true
		opts.TLSVerify = o.TLSCA != ""
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster.listen: %w", err)
	}
	go srv.Start()
	wait := o.ReadyTimeout
	if wait <= 0 {
		wait = 10 * time.Second
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("cluster.listen: the embedded NATS server on %s was not ready within %s", listen, wait)
	}
	o.Logger.Info().Str("url", srv.ClientURL()).Msg("cluster: embedded NATS server started")
	return &Embedded{srv: srv}, nil
}

// URL is where clients connect.
func (e *Embedded) URL() string { return e.srv.ClientURL() }

// Shutdown stops the server and returns once it has stopped. Safe to call
// twice.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}
