package netproxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// FuzzProxy_RefusesAnyRequestForAnInnerAddress sends any bytes as a
// request to a proxy whose only allowed host resolves to a private
// address: whatever is sent, nothing is dialled, the answer (if any) is
// a refusal or an error of bounded size, and only that host is resolved.
func FuzzProxy_RefusesAnyRequestForAnInnerAddress(f *testing.F) {
	for _, seed := range []string{
		"CONNECT api.example.com:443 HTTP/1.1\r\n\r\n",
		"CONNECT API.EXAMPLE.COM.:443 HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://api.example.com/x HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
		"GET http://api.example.com:80/x HTTP/1.0\r\n\r\n",
		"POST http://api.example.com/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	e := start(f, Options{}, []string{"api.example.com"}, map[string][]netip.Addr{
		"api.example.com": {netip.MustParseAddr("10.0.0.1")},
	})
	f.Fuzz(func(t *testing.T, input []byte) {
		c, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			c.Write(input)
			c.(*net.UnixConn).CloseWrite()
		}()
		answer, err := io.ReadAll(io.LimitReader(c, 64<<10))
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		if len(answer) > 2<<10 {
			t.Fatalf("an answer of %d bytes", len(answer))
		}
		if len(answer) > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
			if err != nil {
				t.Fatalf("the answer %q is not HTTP: %v", answer, err)
			}
			switch resp.StatusCode {
			case 400, 403, 408, 431:
			default:
				t.Fatalf("answered %s: %q", resp.Status, answer)
			}
		}
		for _, host := range e.resolver.calls() {
			if host != "api.example.com" {
				t.Fatalf("resolved %q", host)
			}
		}
	})
}
