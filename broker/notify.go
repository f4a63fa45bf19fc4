package broker

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// notifier speaks systemd's notify protocol: one datagram per state
// change on the socket named by NOTIFY_SOCKET. Without the variable (not
// under systemd, or Type=simple) it does nothing.
//
// It is ours rather than go-systemd's daemon.SdNotify and
// SdWatchdogEnabled because those read NOTIFY_SOCKET, WATCHDOG_USEC and
// WATCHDOG_PID from the process environment, while the broker reads
// Options.Environ, the environment it is given (several brokers in one
// test process each have their own); the protocol itself is the dozen
// lines below.
type notifier struct {
	socket   string
	watchdog time.Duration // from WATCHDOG_USEC, if meant for this process
}

func newNotifier(lookup func(string) (string, bool), pid int) *notifier {
	n := &notifier{}
	n.socket, _ = lookup("NOTIFY_SOCKET")
	if usec, ok := lookup("WATCHDOG_USEC"); ok {
		forMe := true
		if p, ok := lookup("WATCHDOG_PID"); ok {
			forMe = p == strconv.Itoa(pid)
		}
		if v, err := strconv.ParseInt(usec, 10, 64); err == nil && v > 0 && forMe {
			n.watchdog = time.Duration(v) * time.Microsecond
		}
	}
	return n
}

// notify sends state lines such as "READY=1"; errors are the caller's to
// log.
func (n *notifier) notify(state ...string) error {
	if n.socket == "" {
		return nil
	}
	addr := n.socket
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(strings.Join(state, "\n")))
	return err
}
