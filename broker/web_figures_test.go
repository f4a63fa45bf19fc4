package broker_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
)

// The web front end's figures in BENCHMARKS.md ("Web front end"):
// measured and logged, not asserted, with WEB_FIGURES=1.

func figures(t *testing.T) {
	if os.Getenv("WEB_FIGURES") == "" {
		t.Skip("a measurement for BENCHMARKS.md: run with WEB_FIGURES=1")
	}
}

// quantile is the q-th quantile of sorted xs, by the nearest rank.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// A thread's page holding a 1 MiB answer and 256 tool calls (each with a
// title and a diff of 1 KiB), loaded in Chromium: how long until it is
// interactive and loaded, and how much HTML it is.
func TestWebFigures_ABigThreadPageLoads(t *testing.T) {
	figures(t)
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "flood-answer 1 64")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "flood-tools 256 1")
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 2); err != nil {
		t.Fatal(err)
	}
	br, base := browse(ctx, t, w, thread, brokertest.Alice)
	var first, interactive, loaded []float64
	var size float64
	for range 7 {
		br.Navigate(base + "/t/discord/" + thread)
		br.WaitText("#turns", "made 256 tool calls")
		var js string
		br.Eval(`(() => { const n = performance.getEntriesByType("navigation")[0];
			return JSON.stringify({First: n.responseStart, Interactive: n.domInteractive, Loaded: n.loadEventEnd, Size: n.decodedBodySize}); })()`, &js)
		var nav struct{ First, Interactive, Loaded, Size float64 }
		if err := json.Unmarshal([]byte(js), &nav); err != nil {
			t.Fatal(err)
		}
		first = append(first, nav.First)
		interactive, loaded, size = append(interactive, nav.Interactive), append(loaded, nav.Loaded), nav.Size
	}
	if n := count(br, "#turns details.tool, #turns details[class*=tool]"); n < 256 {
		t.Errorf("the page shows %d tool calls, want 256", n)
	}
	slices.Sort(first)
	slices.Sort(interactive)
	slices.Sort(loaded)
	t.Logf("a thread's page of %.1f MiB of HTML (a 1 MiB answer, 256 tool calls with 1 KiB diffs), 7 loads: first byte p50 %.0f ms; interactive (domInteractive) p50 %.0f ms, max %.0f ms; load event ended p50 %.0f ms, max %.0f ms",
		size/(1<<20), quantile(first, .5), quantile(interactive, .5), interactive[len(interactive)-1], quantile(loaded, .5), loaded[len(loaded)-1])
}

// An agent's chunks, stamped when the agent sent them, reach a thread's
// open page over Server-Sent Events and the chat's message by its edits:
// when each is first seen in the page, against the chat's edit that first
// showed it and against its sending.
func TestWebFigures_AChunkReachesThePage(t *testing.T) {
	figures(t)
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	br, _ := browse(ctx, t, w, thread, brokertest.Alice)
	br.WaitText("#turns", "You said: hello")
	br.Eval(`(() => {
		window.__seen = {};
		const turns = document.getElementById("turns");
		new MutationObserver(() => {
			const now = performance.timeOrigin + performance.now();
			for (const m of turns.textContent.matchAll(/t=(\d+)/g)) if (!(m[1] in window.__seen)) window.__seen[m[1]] = now;
		}).observe(turns, {childList: true, subtree: true, characterData: true});
		return true; })()`, nil)
	const n = 50
	w.Discord.Post(thread, brokertest.Alice, "stamp "+strconv.Itoa(n)+" 100ms")
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 2); err != nil {
		t.Fatal(err)
	}
	br.WaitText("#turns", "done in")
	var js string
	br.Eval(`JSON.stringify(window.__seen)`, &js)
	seen := map[string]float64{} // stamp → when the page showed it, ms since the epoch
	if err := json.Unmarshal([]byte(js), &seen); err != nil {
		t.Fatal(err)
	}
	chat := map[string]time.Time{} // stamp → the first edit showing it
	for _, m := range w.Srv.Messages(thread) {
		for _, r := range w.Srv.Revisions(thread, m.ID) {
			for _, f := range strings.Fields(r.Content) {
				if s, ok := strings.CutPrefix(f, "t="); ok {
					if at, had := chat[s]; !had || r.At.Before(at) {
						chat[s] = r.At
					}
				}
			}
		}
	}
	var toPage, toChat, pageVsChat []float64
	for s, at := range seen {
		ns, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			continue
		}
		sent := float64(ns) / 1e6
		toPage = append(toPage, at-sent)
		if c, ok := chat[s]; ok {
			toChat = append(toChat, float64(c.UnixNano())/1e6-sent)
			pageVsChat = append(pageVsChat, at-float64(c.UnixNano())/1e6)
		}
	}
	for _, xs := range [][]float64{toPage, toChat, pageVsChat} {
		slices.Sort(xs)
	}
	if len(toPage) < n*9/10 {
		t.Errorf("the page showed %d of %d chunks", len(toPage), n)
	}
	t.Logf("%d chunks 100 ms apart: sent → page p50 %.1f ms, p99 %.1f ms; sent → chat's edit p50 %.1f ms, p99 %.1f ms (%d seen there); page − chat's edit p50 %.1f ms, p99 %.1f ms",
		len(toPage), quantile(toPage, .5), quantile(toPage, .99), quantile(toChat, .5), quantile(toChat, .99), len(toChat), quantile(pageVsChat, .5), quantile(pageVsChat, .99))
}
