// Package browsertest starts a headless Chromium for a test and drives it
// through the DevTools protocol: it loads our own pages from 127.0.0.1,
// reads, clicks, fills and photographs them, and records what ran in them
// (console messages, uncaught exceptions, the browser's log, where Content
// Security Policy violations are reported).
//
// The browser is Debian's chromium (make browser-deps installs it). Where it
// is missing a test that asks for one is skipped and says so, except when
// CI is set: there it fails.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

const (
	// Lifetime bounds one browser: every step of a test and its start, unless
	// the test's own deadline comes sooner.
	Lifetime = 2 * time.Minute

	// StepTimeout bounds one step (a navigation, a wait for a selector, a
	// click): room for a loaded machine, far more than a page of ours takes.
	StepTimeout = 15 * time.Second

	// closeTimeout bounds the browser's graceful close before it is killed.
	closeTimeout = 5 * time.Second

	// maxMessages bounds the console messages kept; later ones are counted
	// in Dropped and not kept.
	maxMessages = 1000
)

// Viewport is the size of the page's window, in CSS pixels, at a device
// scale factor of 1 (so a screenshot is as many pixels wide).
type Viewport struct {
	Width, Height int64
	Mobile        bool // emulate a phone: touch, the mobile meta viewport
}

var (
	// Desktop is a laptop's window.
	Desktop = Viewport{Width: 1280, Height: 800}
	// Phone is a phone held upright.
	Phone = Viewport{Width: 390, Height: 844, Mobile: true}
)

// Message is one thing the page or the browser said: a console API call
// (Type "log", "warning", "error"…), an uncaught exception (Type
// "exception"), or an entry of the browser's log (Source set, e.g.
// "security" for a Content Security Policy violation).
type Message struct {
	Type   string
	Source string
	Text   string
}

func (m Message) String() string {
	if m.Source != "" {
		return m.Type + " [" + m.Source + "]: " + m.Text
	}
	return m.Type + ": " + m.Text
}

// Browser is one headless Chromium with one tab, owned by one test. Its
// methods fail the test (t.Fatalf) when a step fails, so call them from the
// test's goroutine; Messages and the other readers are safe from any.
type Browser struct {
	t          testing.TB
	ctx        context.Context // the tab's; every step derives from it
	profile    string          // the user data dir, unique to this browser
	cancelLife context.CancelCauseFunc
	cancelTab  context.CancelFunc
	cancelExec context.CancelFunc

	mu       sync.Mutex
	pid      int // the browser's main process, once started
	messages []Message
	dropped  int

	closeOnce sync.Once
}

// Path is the chromium binary: chromium on PATH, else /usr/bin/chromium.
func Path() (string, error) {
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(debianPath); err != nil {
		return "", fmt.Errorf("chromium is not installed (make browser-deps, as root, installs Debian's): %w", err)
	}
	return debianPath, nil
}

// debianPath is where Debian's package puts chromium; a variable for the
// tests of a machine without it.
var debianPath = "/usr/bin/chromium"

// New starts a headless Chromium with a fresh profile under t.TempDir(),
// opened on about:blank, and stops it when the test ends (Close), leaving
// no process of it behind. Without chromium the test is skipped, or fails
// when CI is set.
func New(t testing.TB) *Browser {
	t.Helper()
	bin, err := Path()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v; in CI the browser tests must run", err)
		}
		t.Skip(err.Error())
	}
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile")
	home := filepath.Join(dir, "home")
	for _, d := range []string{profile, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	life := Lifetime
	if deadline, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := deadline.Deadline(); ok && time.Until(d)-closeTimeout < life {
			life = time.Until(d) - closeTimeout
		}
	}
	lifeCtx, cancelLife := context.WithCancelCause(context.Background())
	lifeCtx, cancelTimeout := context.WithTimeoutCause(lifeCtx, life,
		fmt.Errorf("the browser outlived its lifetime of %s", life))

	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(int(Desktop.Width), int(Desktop.Height)),
		// Nothing the browser keeps lands outside the test's directory.
		chromedp.Env("HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home),
		chromedp.Flag("disable-gpu", true),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// Its own process group, so that Close finds every process it
			// started; killed by the kernel if the test's thread dies.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		}),
	)
	if os.Getuid() == 0 {
		// Chromium's own sandbox needs user namespaces, which it cannot
		// have as root in a container, and refuses to start as root without
		// this flag. The pages it loads are our own, from 127.0.0.1.
		opts = append(opts, chromedp.NoSandbox)
	} else {
		opts = append(opts, chromedp.Flag("no-sandbox", false))
	}
	execCtx, cancelExec := chromedp.NewExecAllocator(lifeCtx, opts...)

	b := &Browser{t: t, profile: profile, cancelExec: cancelExec}
	b.cancelLife = func(cause error) { cancelTimeout(); cancelLife(cause) }
	tabCtx, cancelTab := chromedp.NewContext(execCtx, chromedp.WithListener(b.record))
	b.ctx, b.cancelTab = tabCtx, cancelTab
	t.Cleanup(b.Close)

	// The first step starts the browser, within the step's bound but under
	// the browser's lifetime (a step's context would end the browser with it).
	started := make(chan error, 1)
	go func() {
		// chromedp enables the Runtime and Log domains on the tab it makes,
		// and the listener hears them from the first event.
		started <- chromedp.Do(tabCtx)
	}()
	select {
	case err = <-started:
	case <-time.After(StepTimeout):
		b.cancelLife(errors.New("the browser did not start in time"))
		err = <-started
		err = fmt.Errorf("no answer in %s: %w", StepTimeout, err)
	}
	if err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	if c := chromedp.FromContext(tabCtx); c != nil && c.Browser != nil {
		if p := c.Browser.Process(); p != nil {
			b.mu.Lock()
			b.pid = p.Pid
			b.mu.Unlock()
		}
	}
	return b
}

// record keeps what the page and the browser say. It runs on the tab's
// event loop, so it only appends.
func (b *Browser) record(ev any) {
	var m Message
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		parts := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			parts = append(parts, remoteText(a))
		}
		m = Message{Type: string(ev.Type), Text: strings.Join(parts, " ")}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			text += " " + d.Exception.Description
		}
		m = Message{Type: "exception", Text: text}
	case *log.EventEntryAdded:
		e := ev.Entry
		m = Message{Type: string(e.Level), Source: string(e.Source), Text: e.Text}
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.messages) >= maxMessages {
		b.dropped++
		return
	}
	b.messages = append(b.messages, m)
}

// remoteText is a console argument as the console shows it: a string as it
// is, anything else by its value or description.
func remoteText(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if o.Type == "string" {
		var s string
		if err := unquote(o.Value, &s); err == nil {
			return s
		}
	}
	if len(o.Value) > 0 {
		return string(o.Value)
	}
	if o.UnserializableValue != "" {
		return string(o.UnserializableValue)
	}
	return o.Description
}

// Context is the tab's context, for chromedp actions the helpers here do not
// cover. It ends when the browser is closed.
func (b *Browser) Context() context.Context { return b.ctx }

// PID is the browser's main process.
func (b *Browser) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pid
}

// Messages is everything the page and the browser have said so far, in
// order (at most the first 1000; Dropped counts the rest).
func (b *Browser) Messages() []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.messages)
}

// Dropped is how many messages came after the first 1000 and were not kept.
func (b *Browser) Dropped() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped
}

// Exceptions is the text of every uncaught exception so far.
func (b *Browser) Exceptions() []string {
	var out []string
	for _, m := range b.Messages() {
		if m.Type == "exception" {
			out = append(out, m.Text)
		}
	}
	return out
}

// CSPViolations is the text of every Content Security Policy violation the
// browser reported so far (a blocked inline script or style, a refused
// source, a refused frame).
func (b *Browser) CSPViolations() []string {
	var out []string
	for _, m := range b.Messages() {
		if m.Source != "" && strings.Contains(m.Text, "Content Security Policy") {
			out = append(out, m.Text)
		}
	}
	return out
}

// step runs actions within StepTimeout, failing the test with what names the
// step.
func (b *Browser) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := b.try(what, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *Browser) try(what string, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeoutCause(b.ctx, StepTimeout,
		fmt.Errorf("%s took longer than %s", what, StepTimeout))
	defer cancel()
	err := chromedp.Do(ctx, actions...)
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.step("navigating to "+url, chromedp.Navigate(url))
}

// Text is the text of the first element matching the CSS selector, as the
// page shows it (innerText), once it is there.
func (b *Browser) Text(selector string) string {
	b.t.Helper()
	var text string
	b.step("reading the text of "+selector, chromedp.WaitReady(chromedp.CSS(selector)),
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			var err error
			text, err = chromedp.Text(chromedp.CSS(selector))(ctx, t)
			return chromedp.Void{}, err
		})
	return text
}

// WaitText waits until the first element matching the CSS selector exists
// and its text contains want, across navigations (a form's submission, a
// redirect); it fails the test naming what the text was.
func (b *Browser) WaitText(selector, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return !!e && e.textContent.includes(%s); })()`,
		jsString(selector), jsString(want))
	var last error
	err := b.try(fmt.Sprintf("waiting for %s to say %q", selector, want),
		func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				// An evaluation fails while a page gives way to the next: look again.
				ok, err := chromedp.Evaluate[bool](expr)(ctx, t)
				if err == nil && ok {
					return chromedp.Void{}, nil
				}
				if err != nil && ctx.Err() == nil {
					last = err
				}
				select {
				case <-ctx.Done():
					return chromedp.Void{}, ctx.Err()
				case <-tick.C:
				}
			}
		})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last look: %v)", err, last)
		}
		b.t.Fatalf("%v; it says %q", err, b.textNow(selector))
	}
}

// textNow is the element's text now, for a failure's message.
func (b *Browser) textNow(selector string) string {
	ctx, cancel := context.WithTimeout(b.ctx, time.Second)
	defer cancel()
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent : "<no such element>"; })()`, jsString(selector))))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return text
}

// Click clicks the first element matching the CSS selector, as a mouse would,
// once it is visible.
func (b *Browser) Click(selector string) {
	b.t.Helper()
	b.step("clicking "+selector, chromedp.Click(chromedp.CSS(selector)))
}

// Fill types value into the form field matching the CSS selector, after
// clearing it, key by key as a person would (input events fire).
func (b *Browser) Fill(selector, value string) {
	b.t.Helper()
	b.step("filling "+selector,
		chromedp.Clear(chromedp.CSS(selector)),
		chromedp.SendKeys(chromedp.CSS(selector), value))
}

// Submit submits the form matching the CSS selector (or the form of the
// field it matches) as its submit button would: the submit event fires and
// the form's checks run (requestSubmit). A navigation it starts is not
// awaited: wait for what the next page shows.
func (b *Browser) Submit(selector string) {
	b.t.Helper()
	b.Eval(fmt.Sprintf(`(() => {
		const e = document.querySelector(%s);
		const f = e && (e instanceof HTMLFormElement ? e : e.form);
		if (!f) throw new Error("no form at " + %[1]s);
		f.requestSubmit();
		return true;
	})()`, jsString(selector)), nil)
}

// Eval evaluates a JavaScript expression in the page (DevTools' evaluation,
// which the page's Content Security Policy does not restrict) and decodes
// its JSON value into out, unless out is nil.
func (b *Browser) Eval(expr string, out any) {
	b.t.Helper()
	b.step("evaluating "+abbrev(expr), func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := chromedp.Evaluate[*runtime.RemoteObject](expr)(ctx, t)
		if err != nil || out == nil {
			return chromedp.Void{}, err
		}
		if v == nil || len(v.Value) == 0 {
			return chromedp.Void{}, fmt.Errorf("no JSON value (%s)", v.Type)
		}
		return chromedp.Void{}, unquote(v.Value, out)
	})
}

// XSSMark is the global a hostile input sets when it runs
// (`<img src=x onerror="window.__xss=1">`): a test shows that none of its
// inputs ran by asserting NoXSS.
const XSSMark = "__xss"

// NoXSS fails the test if the page's window has XSSMark set, or if anything
// the page said names it.
func (b *Browser) NoXSS() {
	b.t.Helper()
	var set bool
	b.Eval(fmt.Sprintf("window.%s !== undefined", XSSMark), &set)
	if set {
		b.t.Fatalf("a script ran: window.%s is set", XSSMark)
	}
	for _, m := range b.Messages() {
		if strings.Contains(m.Text, XSSMark) {
			b.t.Fatalf("a script ran: the page said %s", m)
		}
	}
}

// SetViewport sizes the page's window.
func (b *Browser) SetViewport(v Viewport) {
	b.t.Helper()
	opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
	if v.Mobile {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulatePortrait)
	}
	b.step(fmt.Sprintf("setting the viewport to %dx%d", v.Width, v.Height),
		chromedp.EmulateViewport(v.Width, v.Height, opts...))
}

// Screenshot writes a PNG of the whole page (beyond the window's height) to
// path.
func (b *Browser) Screenshot(path string) {
	b.t.Helper()
	var png []byte
	b.step("taking a screenshot", func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		var err error
		png, err = chromedp.FullScreenshot(100)(ctx, t)
		return chromedp.Void{}, err
	})
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func abbrev(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}
