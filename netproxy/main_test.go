package netproxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the test binary as a forwarder's child when
// NETPROXY_TEST_CHILD says how (the forwarder itself is the init hook's).
func TestMain(m *testing.M) {
	if mode := os.Getenv("NETPROXY_TEST_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	goleak.VerifyTestMain(m)
}

// child is the test binary as a program started by the forwarder.
func child(mode string) int {
	switch mode {
	case "stdin-exit":
		// Say what the environment holds, then exit with
		// NETPROXY_TEST_CODE once stdin ends.
		fmt.Printf("mark=%s\n", os.Getenv("NETPROXY_TEST_MARK"))
		io.Copy(io.Discard, os.Stdin)
		code, _ := strconv.Atoi(os.Getenv("NETPROXY_TEST_CODE"))
		return code
	case "wait-signal":
		// Say ready, then exit 40 + the first signal's number, or die of
		// SIGTERM if NETPROXY_TEST_DIE is set.
		if os.Getenv("NETPROXY_TEST_DIE") == "" {
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			fmt.Println("ready")
			return 40 + int((<-sigs).(syscall.Signal))
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return 1
	case "touch":
		os.WriteFile(os.Getenv("NETPROXY_TEST_FILE"), nil, 0o600)
		return 0
	case "probe":
		return probe()
	}
	fmt.Fprintf(os.Stderr, "unknown NETPROXY_TEST_CHILD %q\n", mode)
	return 2
}

// probe, inside a sandbox, tries the host's address NETPROXY_TEST_HOST
// directly and through the proxy at NETPROXY_TEST_PROXY, and a host not
// allowed (NETPROXY_TEST_REFUSED) through the proxy, and says what
// happened.
func probe() int {
	host := os.Getenv("NETPROXY_TEST_HOST")
	if c, err := net.DialTimeout("tcp", host, 2*time.Second); err != nil {
		fmt.Printf("direct: failed: %v\n", err)
	} else {
		c.Close()
		fmt.Println("direct: connected")
	}
	proxy, _ := url.Parse(os.Getenv("NETPROXY_TEST_PROXY"))
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	for _, what := range []string{"proxied", "refused"} {
		target := host
		if what == "refused" {
			target = os.Getenv("NETPROXY_TEST_REFUSED")
		}
		resp, err := cl.Get("http://" + target + "/")
		if err != nil {
			fmt.Printf("%s: error: %v\n", what, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s: %d %s\n", what, resp.StatusCode, body)
	}
	return 0
}
