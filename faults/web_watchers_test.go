package faults

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"acpbroker/internal/fakediscord"
)

var webLink = regexp.MustCompile(`http://[^\s>)]+/signin\?t=[A-Za-z0-9_-]+`)

// eventSeq is the turn a "turn" event's data names, as it starts.
var eventSeq = regexp.MustCompile(`^data: \{"seq":[0-9]+,`)

// webPerson signs who in to the broker's web front end with the link /web
// gives them, from the loopback address from (the sign-in's rate limit is
// by address), and returns a client carrying their session.
func webPerson(ctx context.Context, t *testing.T, w *world, who fakediscord.User, from string) (*http.Client, string) {
	t.Helper()
	r, err := w.Discord.Slash(ctx, w.Channel, who, "web")
	if err != nil {
		t.Fatal(err)
	}
	link := webLink.FindString(r.Content)
	if link == "" {
		t.Fatalf("/web gave %s no link: %q", who.Username, r.Content)
	}
	jar, _ := cookiejar.New(nil)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Jar: jar, Transport: &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 0},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base, tok, _ := strings.Cut(link, "/signin?t=")
	resp, err := c.PostForm(base+"/signin", url.Values{"t": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("signing %s in: %d", who.Username, resp.StatusCode)
	}
	return c, base
}

// A hundred pages (Server-Sent Event streams, eight a person) watch one
// thread while its turn streams 400 chunks: what the real broker's RSS
// gains, and the turn's duration against the same turn watched by none.
// A figure for BENCHMARKS.md, with WEB_FIGURES=1.
func TestWebFigures_AHundredWatchersOfOneTurn(t *testing.T) {
	if os.Getenv("WEB_FIGURES") == "" {
		t.Skip("a measurement for BENCHMARKS.md: run with WEB_FIGURES=1")
	}
	const watchers, perPerson = 100, 8
	w := newWorld(t, setup{conf: settings{"web.listen": "127.0.0.1:0"}})
	b := w.start()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, alice, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	answers := 1
	turn := func() time.Duration {
		start := time.Now()
		answers++
		w.Discord.Post(thread, alice, fmt.Sprintf("stream 400 10ms run-%d", answers))
		if _, err := w.Discord.AwaitAnswers(ctx, thread, answers); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	turn() // the agent and the page warm
	var alone []time.Duration
	for range 3 {
		alone = append(alone, turn())
	}
	before, _ := b.RSS()

	var clients []*http.Client
	var base string
	for i := range (watchers + perPerson - 1) / perPerson {
		who := fakediscord.User{ID: fmt.Sprint(400 + i), Username: fmt.Sprintf("watcher%d", i), GlobalName: fmt.Sprintf("Watcher %d", i)}
		c, bs := webPerson(ctx, t, w, who, fmt.Sprintf("127.0.0.%d", 10+i))
		clients, base = append(clients, c), bs
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var open, sawEnd atomic.Int64
	var bytes atomic.Int64
	ready := make(chan struct{}, watchers)
	last := fmt.Sprintf("run-%d", answers+3) // the last turn watched, whole
	for i := range watchers {
		c := clients[i/perPerson]
		req, _ := http.NewRequestWithContext(wctx, "GET", base+"/t/discord/"+thread+"/events", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Do(req)
			if err != nil {
				ready <- struct{}{}
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode == 200 {
				open.Add(1)
			}
			ready <- struct{}{}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
			seen := false
			seq := "" // how the last turn's events start
			for sc.Scan() {
				bytes.Add(int64(len(sc.Bytes())))
				l := sc.Text()
				if seq == "" && strings.Contains(l, last) {
					seq = eventSeq.FindString(l)
				}
				if !seen && seq != "" && strings.HasPrefix(l, seq) && strings.Contains(l, "chunk 400") {
					seen = true
					sawEnd.Add(1)
				}
			}
		}()
	}
	for range watchers {
		<-ready
	}
	if open.Load() != watchers {
		t.Fatalf("%d of %d pages watch the thread", open.Load(), watchers)
	}
	idle, _ := b.RSS()
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
				if r, err := b.RSS(); err == nil && r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	var watched []time.Duration
	for range 3 {
		watched = append(watched, turn())
	}
	deadline := time.Now().Add(10 * time.Second)
	for sawEnd.Load() < watchers && time.Now().Before(deadline) {
		<-time.After(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
	<-sampled
	t.Logf("one turn of 400 chunks 10 ms apart, 3 runs each: %v watched by none, %v watched by %d pages (%d saw the last one's end, %.1f MiB sent to them); broker RSS %.1f MiB before, %.1f MiB with the pages open, %.1f MiB at its peak while they watched",
		alone, watched, watchers, sawEnd.Load(), float64(bytes.Load())/(1<<20), float64(before)/(1<<20), float64(idle)/(1<<20), float64(peak.Load())/(1<<20))
}
