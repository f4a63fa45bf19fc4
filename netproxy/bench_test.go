package netproxy

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkProxy_StreamedResponse measures an SSE-like response (200
// chunks of 1 KiB, each flushed) fetched directly, through the proxy's
// socket, and through the forwarder (a subprocess) and the proxy, as an
// agent in a sandbox fetches it: time to the first byte of the body and
// throughput, a new connection per request.
func BenchmarkProxy_StreamedResponse(b *testing.B) {
	const chunks, chunkSize = 200, 1 << 10
	chunk := "data: " + strings.Repeat("x", chunkSize-8) + "\n\n"
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for range chunks {
			io.WriteString(w, chunk)
			fl.Flush()
		}
	})
	up := httptest.NewServer(stream)
	defer up.Close()
	// Agents speak HTTPS: a CONNECT tunnel, a TLS handshake through it.
	upTLS := httptest.NewTLSServer(stream)
	defer upTLS.Close()
	roots := upTLS.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	a, err := ParseAllow([]string{up.Listener.Addr().String(), upTLS.Listener.Addr().String()})
	if err != nil {
		b.Fatal(err)
	}
	p := New(Options{Logger: zerolog.Nop()})
	defer p.Close()
	sock := socketPath(b)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	p.Serve(ln, Owner{Profile: "bench", Allow: a, Key: "agent.allow_hosts"})
	f := startForwarder(b, sock, "stdin-exit")
	if got := f.line(b); !strings.HasPrefix(got, "mark=") {
		b.Fatalf("the child says %q", got)
	}
	defer func() {
		f.stdin.Close()
		f.wait(b)
	}()
	forwarder, _ := url.Parse("http://" + f.addr)

	for _, tc := range []struct {
		name, url string
		tr        *http.Transport
	}{
		{"http/direct", up.URL, &http.Transport{DisableKeepAlives: true}},
		{"http/proxy", up.URL, &http.Transport{DisableKeepAlives: true,
			Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"}),
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}}},
		{"http/forwarder+proxy", up.URL, &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyURL(forwarder)}},
		{"https/direct", upTLS.URL, &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots}}},
		{"https/forwarder+proxy", upTLS.URL, &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: roots},
			Proxy: http.ProxyURL(forwarder)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cl := &http.Client{Transport: tc.tr, Timeout: 10 * time.Second}
			defer tc.tr.CloseIdleConnections()
			var ttfb, total time.Duration
			buf := make([]byte, 32<<10)
			for b.Loop() {
				begun := time.Now()
				resp, err := cl.Get(tc.url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := resp.Body.Read(buf)
				if n == 0 {
					b.Fatalf("no first byte: %v", err)
				}
				ttfb += time.Since(begun)
				rest, err := io.CopyBuffer(io.Discard, resp.Body, buf)
				resp.Body.Close()
				if err != nil || int64(n)+rest != chunks*chunkSize {
					b.Fatalf("read %d bytes, %v", int64(n)+rest, err)
				}
				total += time.Since(begun)
			}
			b.ReportMetric(float64(ttfb.Microseconds())/float64(b.N), "ttfb-µs")
			b.ReportMetric(float64(chunks*chunkSize*b.N)/(1<<20)/total.Seconds(), "MiB/s")
		})
	}
}
