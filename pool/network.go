package pool

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"acpbroker/netproxy"
)

// The networks a sandboxed agent may have (Profile.Network).
const (
	// NetworkProxy: a network namespace of its own, whose only way out
	// is the broker's proxy (Config.Proxy) to the profile's Allow list.
	NetworkProxy = "proxy"
	// NetworkNone: a network namespace of its own with its loopback
	// alone.
	NetworkNone = "none"
	// NetworkHost: the host's network, every port on its loopback
	// included.
	NetworkHost = "host"
)

// Where the proxy reaches a sandboxed agent, inside its sandbox: the
// directory holding the proxy's socket, and the forwarder's program
// (which listens on netproxy.Listen, the sandbox's own loopback).
const (
	sandboxNetDir    = "/run/acp-broker/net"
	sandboxForwarder = "/run/acp-broker/forward"
	proxySocket      = "proxy.sock"
)

// proxyEnv is what an agent behind the proxy is given over its own
// environment (see netproxy.Env).
var proxyEnv = netproxy.Env(netproxy.Listen)

// networkOf is the network prof's agents have in the sandbox s.
func (s Sandbox) networkOf(prof *Profile) string {
	switch {
	case prof.Network != "":
		return prof.Network
	case s.NoNetwork:
		return NetworkNone
	default:
		return NetworkHost
	}
}

// agentNet is one agent's way out through the proxy: a directory of its
// own (given to the agent's user, in Config.NetDir, which others may
// pass through but not list) holding the socket the proxy serves it on.
// Its sandboxes (the agent's, its terminals') are shown the directory
// and the forwarder's program. Bubblewrap, which runs as the agent's
// user, must reach both.
type agentNet struct {
	dir       string
	forwarder string // the program that is the forwarder
	ln        *netproxy.Listener
	refused   chan netproxy.Refusal
}

// refusedBuffer bounds the refusals an agent's turn has not yet seen;
// past it they are dropped (the proxy still logs and counts them).
const refusedBuffer = 16

// openNet starts the proxy's service for thread's agent of prof: nil
// when prof's agents do not go through the proxy, or are not
// sandboxed.
func (p *Pool) openNet(thread string, prof *Profile) (*agentNet, error) {
	sb := p.cfg.Sandbox
	if !sb.Enabled() || sb.networkOf(prof) != NetworkProxy {
		return nil, nil
	}
	if p.cfg.Proxy == nil || p.cfg.NetDir == "" {
		return nil, errors.New("agent network: the profile's agents go through the proxy, but the broker runs none")
	}
	p.fwdOnce.Do(func() { p.fwd, p.fwdErr = forwarderFor(p.cfg.Forwarder, p.cfg.NetDir, p.cfg.RunAs) })
	if p.fwdErr != nil {
		return nil, fmt.Errorf("agent network: the forwarder's program: %w", p.fwdErr)
	}
	forwarder := p.fwd
	dir, err := os.MkdirTemp(p.cfg.NetDir, "a")
	if err != nil {
		return nil, fmt.Errorf("agent network: %w", err)
	}
	n := &agentNet{dir: dir, forwarder: forwarder, refused: make(chan netproxy.Refusal, refusedBuffer)}
	ln, err := listenIn(dir)
	if err == nil && p.cfg.RunAs != nil {
		err = os.Chown(dir, int(p.cfg.RunAs.Uid), int(p.cfg.RunAs.Gid))
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("agent network: %w", err)
	}
	n.ln = p.cfg.Proxy.Serve(ln, netproxy.Owner{
		Profile: prof.Name, Thread: thread, Allow: prof.Allow, Key: prof.AllowKey,
		OnRefused: func(r netproxy.Refusal) {
			select {
			case n.refused <- r:
			default:
			}
		},
	})
	return n, nil
}

// listenIn listens on the proxy's socket in dir, reached through an
// open descriptor of dir so that a long path does not exceed a socket
// address's bound. The socket may be connected to by anyone who reaches
// dir: the agent's user alone.
func listenIn(dir string) (net.Listener, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	path := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + proxySocket
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(filepath.Join(dir, proxySocket), 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// close stops serving the agent and removes its directory.
func (n *agentNet) close() {
	if n == nil {
		return
	}
	n.ln.Close()
	os.RemoveAll(n.dir)
}

// Refused is the channel the proxy's refusals of a's connections
// arrive on (nil, never ready, for an agent not behind the proxy).
// Unread ones wait, a few at most.
func (a *Agent) Refused() <-chan netproxy.Refusal {
	if a.net == nil {
		return nil
	}
	return a.net.refused
}

// mount adds to args (bubblewrap's) what puts a sandboxed program
// behind the proxy: the agent's directory and the forwarder's program,
// each read-only at its place inside (a socket on a read-only mount can
// still be connected to; nothing can be written there, where the
// broker's temporary directory may be memory); it returns them with the
// command line that runs command behind the forwarder.
func (n *agentNet) mount(args []string, command string, cmdArgs []string) ([]string, string, []string) {
	args = append(args, "--ro-bind", n.dir, sandboxNetDir, "--ro-bind", n.forwarder, sandboxForwarder)
	fwd := netproxy.ForwardArgs(sandboxForwarder, sandboxNetDir+"/"+proxySocket, netproxy.Listen, append([]string{command}, cmdArgs...)...)
	return args, fwd[0], fwd[1:]
}

// forwarderFor is the forwarder's program for agents run as runAs:
// program (default: the running one) where their user can reach it,
// else a copy of it in netDir, made once.
func forwarderFor(program, netDir string, runAs *syscall.Credential) (string, error) {
	if program == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		program = exe
	}
	if runAs == nil || reachable(program, runAs) {
		return program, nil
	}
	src, err := os.Open(program)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.CreateTemp(netDir, "forward")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst.Name(), 0o755)
	}
	if err != nil {
		os.Remove(dst.Name())
		return "", err
	}
	return dst.Name(), nil
}

// reachable reports whether user c may open and run path as its mode
// bits say: every directory above it searchable, the file executable
// (supplementary groups and ACLs are not looked at: a "no" is safe).
func reachable(path string, c *syscall.Credential) bool {
	may := func(p string, bit uint32) bool {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return false
		}
		switch {
		case st.Uid == c.Uid:
			return st.Mode&(bit<<6) != 0
		case st.Gid == c.Gid:
			return st.Mode&(bit<<3) != 0
		default:
			return st.Mode&bit != 0
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		if !may(d, 1) {
			return false
		}
		if d == "/" {
			break
		}
	}
	return may(abs, 1) && may(abs, 4)
}
