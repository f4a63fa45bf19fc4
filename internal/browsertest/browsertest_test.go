package browsertest

import (
	"fmt"
	"html"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// strictCSP is the policy the web front end serves: no inline script or
// style, nothing from elsewhere, never framed.
const strictCSP = "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'"

// site is a tiny site of the kinds of page the web front end serves: a
// form, a page updated over Server-Sent Events, a page with a script of its
// own and one whose inline script the policy refuses.
type site struct {
	*httptest.Server
	events chan string // each one is sent to the open event stream
}

func newSite(t *testing.T) *site {
	s := &site{events: make(chan string)}
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, csp, body string) {
		if csp != "" {
			w.Header().Set("Content-Security-Policy", csp)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><html><head><meta name=viewport content=\"width=device-width\"><title>t</title></head><body>%s</body></html>", body)
	}
	script := func(js string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript")
			fmt.Fprint(w, js)
		}
	}
	mux.HandleFunc("GET /form", func(w http.ResponseWriter, r *http.Request) {
		page(w, strictCSP, `<form id=f method=post action=/greet><input id=name name=name required><button>Send</button></form>
			<button id=more type=button>more</button> <span id=count>0</span><script src=/app.js></script>`)
	})
	mux.HandleFunc("/app.js", script(`document.getElementById("more").addEventListener("click", () => {
		const c = document.getElementById("count"); c.textContent = String(Number(c.textContent) + 1); });`))
	mux.HandleFunc("POST /greet", func(w http.ResponseWriter, r *http.Request) {
		page(w, strictCSP, `<p id=greeting>Hello, `+html.EscapeString(r.FormValue("name"))+`</p>`)
	})
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, r *http.Request) {
		page(w, strictCSP, `<p id=live>waiting</p><script src=/live.js></script>`)
	})
	mux.HandleFunc("/live.js", script(`new EventSource("/events").onmessage = (e) => { document.getElementById("live").textContent = e.data; };`))
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case <-r.Context().Done():
				return
			case e := <-s.events:
				fmt.Fprintf(w, "data: %s\n\n", e)
				w.(http.Flusher).Flush()
			}
		}
	})
	inline := `<p id=static>static</p><script>window.__xss = 1; console.log("__xss inline");</script>`
	mux.HandleFunc("GET /csp", func(w http.ResponseWriter, r *http.Request) { page(w, strictCSP, inline) })
	mux.HandleFunc("GET /nocsp", func(w http.ResponseWriter, r *http.Request) { page(w, "", inline) })
	mux.HandleFunc("GET /throws", func(w http.ResponseWriter, r *http.Request) {
		page(w, strictCSP, `<p>x</p><script src=/throws.js></script>`)
	})
	mux.HandleFunc("/throws.js", script(`console.warn("about to throw"); throw new Error("thrown on purpose");`))
	mux.HandleFunc("GET /tall", func(w http.ResponseWriter, r *http.Request) {
		page(w, "", `<div id=tall style="height:3000px">tall</div>`)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestBrowser_FillsAndSubmitsAFormAndClicks(t *testing.T) {
	s := newSite(t)
	b := New(t)
	b.Navigate(s.URL + "/form")
	b.Click("#more")
	b.Click("#more")
	b.WaitText("#count", "2")
	b.Fill("#name", "Ada <b>")
	b.Submit("#name")
	b.WaitText("#greeting", "Hello, Ada <b>")
	if got := b.Text("#greeting"); got != "Hello, Ada <b>" {
		t.Fatalf("the greeting says %q", got)
	}
	if ex := b.Exceptions(); len(ex) > 0 {
		t.Fatalf("the pages threw: %q", ex)
	}
}

func TestBrowser_SeesServerSentEventsUpdateThePage(t *testing.T) {
	s := newSite(t)
	b := New(t)
	b.Navigate(s.URL + "/live")
	if got := b.Text("#live"); got != "waiting" {
		t.Fatalf("before any event the page says %q", got)
	}
	for _, e := range []string{"first turn", "second turn"} {
		s.events <- e // received once the page's EventSource is connected
		b.WaitText("#live", e)
	}
}

func TestBrowser_SeesTheCSPRefuseAnInlineScript(t *testing.T) {
	s := newSite(t)
	b := New(t)

	b.Navigate(s.URL + "/csp")
	b.WaitText("#static", "static")
	if v := b.CSPViolations(); len(v) == 0 {
		t.Fatalf("no Content Security Policy violation reported; the browser said %v", b.Messages())
	} else if !strings.Contains(v[0], "inline script") {
		t.Errorf("the violation is not about the inline script: %q", v[0])
	}
	b.NoXSS()

	// The same page without the policy: the script runs, and the two
	// signals NoXSS reads both show it.
	b.Navigate(s.URL + "/nocsp")
	var ran bool
	b.Eval("window.__xss !== undefined", &ran)
	if !ran {
		t.Fatal("the inline script of a page without a policy did not run: the harness cannot see a script run")
	}
	if !slices.ContainsFunc(b.Messages(), func(m Message) bool { return m.Type == "log" && m.Text == "__xss inline" }) {
		t.Fatalf("the script's console.log was not recorded: %v", b.Messages())
	}
}

func TestBrowser_RecordsConsoleMessagesAndExceptions(t *testing.T) {
	s := newSite(t)
	b := New(t)
	b.Navigate(s.URL + "/throws")
	var ex []string
	for range 50 { // the exception's event may trail the load event
		if ex = b.Exceptions(); len(ex) > 0 {
			break
		}
		b.Eval("1", nil) // a round trip: events before it are delivered
	}
	if len(ex) != 1 || !strings.Contains(ex[0], "thrown on purpose") {
		t.Fatalf("exceptions %q, want the one the script threw; the browser said %v", ex, b.Messages())
	}
	if !slices.ContainsFunc(b.Messages(), func(m Message) bool { return m.Type == "warning" && m.Text == "about to throw" }) {
		t.Fatalf("console.warn was not recorded: %v", b.Messages())
	}
}

func TestBrowser_ScreenshotIsAPNGOfTheViewportsWidthAndTheWholePage(t *testing.T) {
	s := newSite(t)
	b := New(t)
	b.Navigate(s.URL + "/tall")
	for _, c := range []struct {
		name string
		v    Viewport
	}{{"phone", Phone}, {"desktop", Desktop}} {
		b.SetViewport(c.v)
		path := filepath.Join(t.TempDir(), c.name+".png")
		b.Screenshot(path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: the screenshot is not a PNG: %v", c.name, err)
		}
		if cfg.Width != int(c.v.Width) || cfg.Height < 3000 {
			t.Fatalf("%s: the screenshot is %dx%d, want %d wide and the page's 3000 px tall", c.name, cfg.Width, cfg.Height, c.v.Width)
		}
		var inner int
		b.Eval("window.innerWidth", &inner)
		if inner != int(c.v.Width) {
			t.Fatalf("%s: the page's window is %d wide, want %d", c.name, inner, c.v.Width)
		}
	}
}

// The browser's processes, many of them, are all gone after Close: when it
// closes as it should, when its main process was killed and its helpers
// orphaned, and when its helpers hang (stopped, they never notice their
// parent has gone).
func TestBrowser_CloseLeavesNoProcessBehind(t *testing.T) {
	for _, c := range []struct {
		name           string
		kill, stopHelp bool
	}{{"graceful", false, false}, {"main killed", true, false}, {"helpers hang", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSite(t)
			b := New(t)
			b.Navigate(s.URL + "/form") // a renderer, a network service
			before := b.processes()
			if len(before) < 2 || !slices.Contains(before, b.PID()) {
				t.Fatalf("the browser's processes %v: want its main one (%d) and its helpers", before, b.PID())
			}
			if c.stopHelp {
				for _, pid := range before {
					if pid != b.PID() {
						if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if c.kill {
				if err := syscall.Kill(b.PID(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			b.Close()
			if left := b.processes(); len(left) > 0 {
				t.Fatalf("processes %v are left after Close", left)
			}
			for _, pid := range before {
				if state, _, ok := procStat(pid); ok && state != 'Z' && state != 'X' {
					t.Errorf("process %d (one of the browser's) is still there, state %c", pid, state)
				}
			}
			b.Close() // again: nothing to do
		})
	}
}

// fakeTB is a test New is given, to see it skip or fail.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNew_WithoutChromiumSkipsButFailsInCI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := debianPath
	debianPath = filepath.Join(t.TempDir(), "chromium")
	t.Cleanup(func() { debianPath = old })

	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			New(f)
		}()
		<-done
		switch {
		case ci == "" && (f.skipped == "" || f.failed != ""):
			t.Errorf("without CI: skipped %q, failed %q; want a skip", f.skipped, f.failed)
		case ci != "" && (f.failed == "" || f.skipped != ""):
			t.Errorf("in CI: skipped %q, failed %q; want a failure", f.skipped, f.failed)
		}
		for _, msg := range []string{f.skipped, f.failed} {
			if msg != "" && !strings.Contains(msg, "make browser-deps") {
				t.Errorf("the message %q does not say how to install chromium", msg)
			}
		}
	}
}
