package netproxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeAddr is a 127.0.0.1 address with a port nothing listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func testBinary(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// startForwarder starts the forwarder on a free address relaying to sock,
// its child in mode with env added to the environment of both.
func startForwarder(t testing.TB, sock, mode string, env ...string) *forwardRun {
	t.Helper()
	return startForwarderArgs(t, sock, mode, nil, env...)
}

// startForwarderArgs is startForwarder with more of the forwarder's
// arguments.
func startForwarderArgs(t testing.TB, sock, mode string, args []string, env ...string) *forwardRun {
	t.Helper()
	exe := testBinary(t)
	addr := freeAddr(t)
	args = append(append([]string{ForwardArg, "--socket", sock, "--listen", addr}, args...), "--", exe)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), append(env, "NETPROXY_TEST_CHILD="+mode)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	f := &forwardRun{cmd: cmd, addr: addr, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: &bytes.Buffer{}}
	cmd.Stderr = f.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return f
}

// forwardRun is the test binary run as the forwarder, through the init
// hook, with the test binary again as its child.
type forwardRun struct {
	cmd    *exec.Cmd
	addr   string
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bytes.Buffer
}

// line is the child's next line on stdout.
func (f *forwardRun) line(t testing.TB) string {
	t.Helper()
	s, err := f.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's stdout: %v (stderr: %s)", err, f.stderr)
	}
	return strings.TrimSuffix(s, "\n")
}

// wait is the forwarder's exit status, within 10 s.
func (f *forwardRun) wait(t testing.TB) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		f.cmd.Process.Kill()
		<-done
		t.Fatalf("the forwarder did not exit (stderr: %s)", f.stderr)
	}
	if ws := f.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		t.Fatalf("the forwarder itself was killed by %v", ws.Signal())
	}
	return f.cmd.ProcessState.ExitCode()
}

func TestForwarder_RelaysToTheProxyAndExitsWithTheChildsStatus(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello through the forwarder")
	}))
	defer up.Close()
	echo := serveTCP(t, echoAfterEOF)
	e := start(t, Options{}, []string{up.Listener.Addr().String(), echo.addr()}, nil)
	f := startForwarder(t, e.sock, "stdin-exit", "NETPROXY_TEST_CODE=7", "NETPROXY_TEST_MARK=inherited")
	// The child runs with the forwarder's environment; the forwarder
	// listens before it starts the child.
	if got := f.line(t); got != "mark=inherited" {
		t.Fatalf("the child says %q", got)
	}

	proxy, _ := url.Parse("http://" + f.addr)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}}
	resp, err := cl.Get(up.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello through the forwarder" {
		t.Fatalf("got %s %q", resp.Status, body)
	}

	// A tunnel through the forwarder keeps a half-close both ways.
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "CONNECT "+echo.addr()+" HTTP/1.1\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT through the forwarder: %v %v", resp, err)
	}
	io.WriteString(c, "half")
	c.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(br); err != nil || string(got) != "got: half" {
		t.Fatalf("read %q, %v", got, err)
	}

	f.stdin.Close()
	if code := f.wait(t); code != 7 {
		t.Errorf("the forwarder exited %d, want the child's 7 (stderr: %s)", code, f.stderr)
	}
}

func TestForwarder_RelaysAtMostMaxConnsAtOnce(t *testing.T) {
	up := serveTCP(t, silent)
	e := start(t, Options{}, []string{up.addr()}, nil)
	f := startForwarderArgs(t, e.sock, "stdin-exit", []string{"--max-conns", "2"})
	f.line(t)
	tunnel := func() (net.Conn, error) {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			return nil, err
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "CONNECT "+up.addr()+" HTTP/1.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			return nil, err
		}
		if resp.StatusCode != 200 {
			c.Close()
			return nil, errors.New(resp.Status)
		}
		return c, nil
	}
	c1, err := tunnel()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := tunnel()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c3, err := tunnel(); err == nil {
		c3.Close()
		t.Fatal("a third connection was relayed past --max-conns 2")
	}
	c1.Close()
	// Once one ends there is room again (the forwarder sees the end a
	// moment later).
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := tunnel()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after a relay ended: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.stdin.Close()
	f.wait(t)
}

func TestForwarder_PassesSignalsToTheChild(t *testing.T) {
	sock := socketPath(t)
	for _, tc := range []struct {
		sig  syscall.Signal
		die  bool
		want int
	}{
		{syscall.SIGTERM, false, 40 + 15},
		{syscall.SIGHUP, false, 40 + 1},
		{syscall.SIGINT, false, 40 + 2},
		// A child killed by the signal: 128 + its number, as a shell says.
		{syscall.SIGTERM, true, 128 + 15},
	} {
		var env []string
		if tc.die {
			env = append(env, "NETPROXY_TEST_DIE=1")
		}
		f := startForwarder(t, sock, "wait-signal", env...)
		if got := f.line(t); got != "ready" {
			t.Fatalf("the child says %q", got)
		}
		f.cmd.Process.Signal(tc.sig)
		if code := f.wait(t); code != tc.want {
			t.Errorf("%v (child dies: %v): the forwarder exited %d, want %d (stderr: %s)", tc.sig, tc.die, code, tc.want, f.stderr)
		}
	}
}

func TestForwarder_CannotListenSaysWhyAndStartsNoChild(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	exe := testBinary(t)
	mark := filepath.Join(t.TempDir(), "started")
	cmd := exec.Command(exe, ForwardArg, "--socket", socketPath(t), "--listen", taken.Addr().String(), "--", exe)
	cmd.Env = append(os.Environ(), "NETPROXY_TEST_CHILD=touch", "NETPROXY_TEST_FILE="+mark)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 {
		t.Fatalf("the forwarder ended with %v, want exit status 127", err)
	}
	if !strings.Contains(stderr.String(), "cannot listen on "+taken.Addr().String()) {
		t.Errorf("stderr says %q", stderr.String())
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the child was started")
	}

	// The same child does start when the forwarder can listen.
	cmd = exec.Command(exe, ForwardArg, "--socket", socketPath(t), "--listen", "127.0.0.1:0", "--", exe)
	cmd.Env = append(os.Environ(), "NETPROXY_TEST_CHILD=touch", "NETPROXY_TEST_FILE="+mark)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the child did not run: %v", err)
	}
}

func TestForwarder_RefusesBadArguments(t *testing.T) {
	exe := testBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0", "--", exe}, "--socket is required"},
		{[]string{"--socket", "/x.sock", "--listen", "127.0.0.1:0"}, "no command after --"},
		{[]string{"--socket", "/x.sock", "--listen", "127.0.0.1:0", "--", "/no/such/program"}, "/no/such/program"},
	} {
		cmd := exec.Command(exe, append([]string{ForwardArg}, tc.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 127 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: ended with %v, stderr %q; want 127 and %q", tc.args, err, stderr.String(), tc.want)
		}
	}

	// A command that is there but may not be run: 126, as a shell says.
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := exec.Command(exe, ForwardArg, "--socket", "/x.sock", "--listen", "127.0.0.1:0", "--", notExec).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 126 {
		t.Errorf("a command that may not be run: ended with %v, want 126", err)
	}
}

func TestForwarder_InANetworkNamespaceReachesOnlyTheProxy(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("bwrap is not on PATH: the sandboxed forwarder is not tried")
	}
	if out, err := exec.Command(bwrap, "--unshare-net", "--dev-bind", "/", "/", "true").CombinedOutput(); err != nil {
		t.Skipf("bwrap cannot make a network namespace here: %v: %s", err, out)
	}
	up := serveTCP(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 19\r\nConnection: close\r\n\r\nhello from the host")
	})
	other := serveTCP(t, silent)
	e := start(t, Options{}, []string{up.addr()}, nil)
	exe := testBinary(t)
	const inside = Listen
	cmd := exec.Command(bwrap, append([]string{"--unshare-net", "--dev-bind", "/", "/", "--die-with-parent", "--"},
		ForwardArgs(exe, e.sock, inside, exe)...)...)
	cmd.Env = append(os.Environ(), "NETPROXY_TEST_CHILD=probe", "NETPROXY_TEST_HOST="+up.addr(),
		"NETPROXY_TEST_REFUSED="+other.addr(), "NETPROXY_TEST_PROXY=http://"+inside)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, want := range []string{
		"direct: failed",
		"proxied: 200 hello from the host",
		"refused: 403 acp-broker: " + other.addr() + " is not allowed: not in " + testKey,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the sandboxed child says:\n%s\nwant a line with %q", out, want)
		}
	}
}

func TestEnv_PointsEveryToolAtTheForwarder(t *testing.T) {
	env := map[string]string{}
	for _, kv := range Env(Listen) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		if env[k] != "http://127.0.0.1:3128" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		if env[k] != "localhost,127.0.0.1,::1" {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if env["NODE_USE_ENV_PROXY"] != "1" {
		t.Errorf("NODE_USE_ENV_PROXY = %q", env["NODE_USE_ENV_PROXY"])
	}
}
