package netproxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serve answers one connection of the agent's: one CONNECT tunnel or one
// plain HTTP request.
func (l *Listener) serve(c net.Conn) {
	defer l.release(c, true)
	act := newActivity()
	cr := &connReader{r: c, limit: maxHeaderBytes, act: act}
	br := bufio.NewReader(cr)
	c.SetReadDeadline(time.Now().Add(headerTimeout))
	req, err := http.ReadRequest(br)
	if err != nil {
		switch {
		case cr.limit == 0:
			reply(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("acp-broker: request headers are larger than %d bytes", maxHeaderBytes))
		case errors.Is(err, os.ErrDeadlineExceeded):
			reply(c, http.StatusRequestTimeout, fmt.Sprintf("acp-broker: no request within %s", headerTimeout))
		case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		default:
			reply(c, http.StatusBadRequest, "acp-broker: bad request: "+err.Error())
		}
		return
	}
	cr.limit = -1
	c.SetReadDeadline(time.Time{})

	host, port, err := target(req)
	if err != nil {
		reply(c, http.StatusBadRequest, "acp-broker: "+err.Error())
		return
	}
	addrs, reason, err := l.check(host, port)
	if reason != "" {
		l.refused(Refusal{Host: host, Port: port, Reason: reason})
		reply(c, http.StatusForbidden, fmt.Sprintf("acp-broker: %s is not allowed: %s", net.JoinHostPort(host, strconv.Itoa(port)), reason))
		return
	}
	if err != nil {
		l.failed(c, host, port, err)
		return
	}
	l.counts.allowed.Add(1)
	l.p.open.Add(1)
	defer l.p.open.Add(-1)

	up, err := l.dial(addrs, port)
	if err != nil {
		l.failed(c, host, port, err)
		return
	}
	if !l.track(up) {
		return
	}
	defer l.release(up, false)
	l.log.Debug().Str("host", host).Int("port", port).Str("method", req.Method).Msg("network connection")

	ctx, cancel := context.WithCancelCause(l.ctx)
	defer cancel(errServed)
	l.wg.Go(func() { l.closeIdle(ctx, act, c, up) })
	upR := &connReader{r: up, limit: -1, act: act}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		// What the agent sent after its request (a TLS hello, eagerly)
		// is in br's buffer; the rest is read from cr itself.
		ahead, _ := br.Peek(br.Buffered())
		tunnel(c, io.MultiReader(bytes.NewReader(ahead), cr), up, upR)
		return
	}
	forward(c, req, up, upR)
}

// failed answers a connection whose host could not be resolved or
// dialled 502, and logs it unless the listener is closing.
func (l *Listener) failed(c net.Conn, host string, port int, err error) {
	if l.ctx.Err() != nil {
		return
	}
	l.log.Info().Str("host", host).Int("port", port).Err(err).Msg("network connection failed")
	reply(c, http.StatusBadGateway, fmt.Sprintf("acp-broker: %s: %v", net.JoinHostPort(host, strconv.Itoa(port)), err))
}

// target is the host (as asked, without brackets) and port req is for.
func target(req *http.Request) (host string, port int, err error) {
	var p string
	switch {
	case req.Method == http.MethodConnect:
		host, p, err = net.SplitHostPort(req.URL.Host)
		if err != nil {
			return "", 0, fmt.Errorf("CONNECT needs host:port: %v", err)
		}
	case req.URL.IsAbs() && req.URL.Scheme == "http":
		host, p = req.URL.Hostname(), req.URL.Port()
		if p == "" {
			p = "80"
		}
	default:
		return "", 0, fmt.Errorf("only CONNECT host:port and absolute http:// requests are proxied, not %s %s", truncate(req.Method, 20), truncate(req.RequestURI, 80))
	}
	if host == "" {
		return "", 0, fmt.Errorf("the request names no host")
	}
	if _, err := netip.ParseAddr(host); err != nil {
		if err := checkName(normalName(host)); err != nil {
			return "", 0, fmt.Errorf("bad host %q: %v", truncate(host, 80), err)
		}
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return host, port, nil
}

// key names the owner's allow list in refusals.
func (l *Listener) key() string {
	if l.owner.Key == "" {
		return "the allow list"
	}
	return l.owner.Key
}

// check says whether the agent may reach host:port and, if so, the
// addresses to dial: those host resolves to that are public or that an
// entry names exactly. A reason is a refusal; an error, a failure to
// resolve.
func (l *Listener) check(host string, port int) (addrs []netip.Addr, reason string, err error) {
	allow := l.owner.Allow
	if !allow.Permits(host, port) {
		return nil, "not in " + l.key(), nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeoutCause(l.ctx, l.p.dialTimeout, errDialTimeout)
		addrs, err = l.p.resolve(ctx, normalName(host))
		cancel()
		if err != nil {
			return nil, "", fmt.Errorf("cannot resolve: %w", err)
		}
		if len(addrs) == 0 {
			return nil, "", fmt.Errorf("cannot resolve: no addresses")
		}
	}
	var ok []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if kind := special(a); kind != "" && !allow.permitsAddr(a, port) {
			if reason == "" {
				reason = fmt.Sprintf("resolves to %s, %s", a, kind)
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, reason, nil
	}
	return ok, "", nil
}

// dial connects to the first of addrs that answers on port, within the
// dial timeout.
func (l *Listener) dial(addrs []netip.Addr, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeoutCause(l.ctx, l.p.dialTimeout, errDialTimeout)
	defer cancel()
	var d net.Dialer
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a.WithZone(""), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if cause := context.Cause(ctx); cause != nil {
			return nil, fmt.Errorf("cannot connect: %w", cause)
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("cannot connect: %w", errors.Join(errs...))
}

// closeIdle closes c and up once no byte has passed either way for the
// idle timeout, or returns when ctx ends (the connection served, or the
// listener closed).
func (l *Listener) closeIdle(ctx context.Context, act *activity, c, up net.Conn) {
	idle := l.p.idleTimeout
	t := time.NewTimer(idle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if since := act.since(); since < idle {
			t.Reset(idle - since)
			continue
		}
		l.log.Debug().Dur("idle", idle).Msg("network connection closed: idle")
		c.Close()
		up.Close()
		return
	}
}

// tunnel relays bytes both ways between the agent (c, read through cr)
// and up until both ways have ended, keeping a half-close: the end of
// one way is passed on as a close for writing. An error either way
// closes both.
func tunnel(c net.Conn, cr io.Reader, up net.Conn, upR io.Reader) {
	var wg sync.WaitGroup
	wg.Go(func() { pump(up, cr, c) })
	pump(c, upR, up)
	wg.Wait()
}

// pump copies src to dst, then closes dst for writing; on an error it
// closes both dst and other (src's connection) so the other way ends too.
func pump(dst net.Conn, src io.Reader, other net.Conn) {
	buf := make([]byte, 32<<10)
	_, err := io.CopyBuffer(onlyWriter{dst}, src, buf)
	if err != nil {
		dst.Close()
		other.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
}

// onlyWriter hides a net.Conn's ReadFrom, so io.CopyBuffer uses the
// buffer and the reads go through the activity count.
type onlyWriter struct{ io.Writer }

// hopHeaders are the headers of one connection, not passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// stripHop removes the hop-by-hop headers, those Connection names and any
// Proxy-* header.
func stripHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Proxy-") {
			delete(h, name)
		}
	}
}

// forward sends req to up and its response to the agent: one request per
// connection.
func forward(c net.Conn, req *http.Request, up net.Conn, upR *connReader) {
	stripHop(req.Header)
	req.Close = true
	req.RequestURI = ""
	if err := req.Write(up); err != nil {
		reply(c, http.StatusBadGateway, "acp-broker: cannot send the request: "+err.Error())
		return
	}
	br := bufio.NewReaderSize(upR, maxResponseHeaderBytes)
	for {
		upR.limit = maxResponseHeaderBytes
		named := connectionNames(br)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			reply(c, http.StatusBadGateway, "acp-broker: no response: "+err.Error())
			return
		}
		upR.limit = -1
		interim := resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols
		for _, name := range named {
			resp.Header.Del(name)
		}
		stripHop(resp.Header)
		resp.Close = !interim
		err = resp.Write(c)
		resp.Body.Close()
		if err != nil || !interim {
			return
		}
	}
}

// connectionNames are the header names the Connection header of the
// response header block at the start of br lists (http.ReadResponse drops
// a Connection header that says close, and with it the names it lists).
// It only peeks: br is left as it was.
func connectionNames(br *bufio.Reader) []string {
	for n := 1; ; n = br.Buffered() + 1 {
		b, err := br.Peek(n)
		end := bytes.Index(b, []byte("\n\r\n")) + 3
		if end < 3 {
			end = bytes.Index(b, []byte("\n\n")) + 2
		}
		if end >= 2 {
			tr := textproto.NewReader(bufio.NewReader(bytes.NewReader(b[:end])))
			if _, err := tr.ReadLine(); err != nil {
				return nil
			}
			h, err := tr.ReadMIMEHeader()
			if err != nil {
				return nil
			}
			var names []string
			for _, v := range h.Values("Connection") {
				for _, name := range strings.Split(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						names = append(names, name)
					}
				}
			}
			return names
		}
		if err != nil {
			return nil
		}
	}
}

// maxReplyText bounds the text of a refusal or an error, which may quote
// what the agent sent.
const maxReplyText = 1 << 10

// reply writes a short text response and leaves c to be closed.
func reply(c net.Conn, code int, body string) {
	body = truncate(body, maxReplyText) + "\n"
	c.SetWriteDeadline(time.Now().Add(replyTimeout))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// activity is when a byte last passed either way of a connection.
type activity struct {
	start time.Time
	last  atomic.Int64 // since start
}

func newActivity() *activity { return &activity{start: time.Now()} }

func (a *activity) touch() { a.last.Store(int64(time.Since(a.start))) }

// since is how long ago a byte last passed.
func (a *activity) since() time.Duration {
	return time.Since(a.start) - time.Duration(a.last.Load())
}

// connReader reads a connection, noting activity, and at most limit bytes
// while limit is not negative (a request's headers).
type connReader struct {
	r     io.Reader
	limit int64
	act   *activity
}

var errHeaderTooLarge = errors.New("request headers too large")

func (cr *connReader) Read(p []byte) (int, error) {
	if cr.limit == 0 {
		return 0, errHeaderTooLarge
	}
	if cr.limit > 0 && int64(len(p)) > cr.limit {
		p = p[:cr.limit]
	}
	n, err := cr.r.Read(p)
	if cr.limit > 0 {
		cr.limit -= int64(n)
	}
	if n > 0 {
		cr.act.touch()
	}
	return n, err
}

func itoa(n int) string { return strconv.Itoa(n) }

// truncate is s cut to at most n bytes, marked if cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
