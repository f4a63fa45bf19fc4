package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The console is a front end of the web's like the others: /web there
// gives its person a link that signs them in to the console's thread.
func TestRun_ConsoleWebSignsInToItsThread(t *testing.T) {
	bin := brokerBin(t)
	port := freePort(t)
	p := startProcess(t, bin, writeConfig(t, fmt.Sprintf("[web]\nlisten = \"127.0.0.1:%d\"", port)))
	p.say(t, "hello")
	p.out.waitFor(t, "You said: hello", 20*time.Second)
	p.say(t, "/web")
	p.out.waitFor(t, "/signin?t=", 20*time.Second)
	link := regexp.MustCompile(`http://\S+/signin\?t=(\S+)`).FindStringSubmatch(p.out.String())
	if link == nil {
		t.Fatalf("no sign-in link in:\n%s", p.out)
	}
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	resp, err := client.PostForm(base+"/signin", url.Values{"t": {link[1]}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/t/console/console" || !strings.Contains(string(page), "You said: hello") {
		t.Fatalf("signing in led to %s (%d):\n%s", resp.Request.URL, resp.StatusCode, page)
	}
	p.in.Close()
}
