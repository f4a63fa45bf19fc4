package broker_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/brokertest"
	"acpbroker/internal/browsertest"
)

// The pages people look at most, at a laptop's width and a phone's: the
// threads list, a thread's page with a diff and a permission request, and
// the operator's view. Each fits its width (nothing but a block of code
// scrolls sideways) and is photographed; with WEB_SCREENSHOTS set (a
// directory, from the module's root: WEB_SCREENSHOTS=docs) the
// photographs are kept there, as README shows them.
func TestWebBrowser_Screenshots(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("WEB_SCREENSHOTS"); d != "" {
		dir = d
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w := world(t, brokertest.Settings{"web.listen": "127.0.0.1:0"})
	w.Raw = "[[api.tokens]]\nname = \"ops\"\ntoken = \"ops-token-0123456789abcdef\"\nchannels = [\"*\"]\nweb_admin = true\n"
	open(t, w)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	other, err := w.Discord.Mention(ctx, brokertest.Bob, "Summarise the **release notes** for `v2.4`, please.")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, other, 1); err != nil {
		t.Fatal(err)
	}
	thread, err := w.Discord.Mention(ctx, brokertest.Alice, "diff")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Discord.AwaitAnswers(ctx, thread, 1); err != nil {
		t.Fatal(err)
	}
	w.Discord.Post(thread, brokertest.Alice, "permission")
	if _, err := w.Discord.PermissionRequest(ctx, thread); err != nil {
		t.Fatal(err)
	}

	br, base := browse(ctx, t, w, thread, brokertest.Alice)
	ops := browsertest.New(t)
	ops.Navigate(base + "/admin/signin")
	ops.Fill(`input[name="token"]`, "ops-token-0123456789abcdef")
	ops.Click("#admin-signin")
	ops.WaitText("#admin", "Web front end")

	shots := []struct {
		name, path, selector, want string
		br                         *browsertest.Browser
	}{
		{"threads", "/threads", "#threads", "permission", br},
		{"thread", "/t/discord/" + thread, "#controls .ask", "Permission needed", br},
		{"admin", "/admin", "#admin", "Web front end", ops},
	}
	for _, v := range []struct {
		name string
		vp   browsertest.Viewport
	}{{"desktop", browsertest.Desktop}, {"phone", browsertest.Phone}} {
		for _, s := range shots {
			s.br.SetViewport(v.vp)
			s.br.Navigate(base + s.path)
			s.br.WaitText(s.selector, s.want)
			if s.name == "thread" {
				s.br.WaitText("#turns .diff", "main.go")
				var open bool
				s.br.Eval(`document.querySelector("#turns details:has(.diff)").open`, &open)
				if !open { // a person unfolds the edit to read its diff
					s.br.Click("#turns details:has(.diff) > summary")
				}
			}
			var wide string
			s.br.Eval(`JSON.stringify(Array.from(document.querySelectorAll("body *")).filter(e => {
				const r = e.getBoundingClientRect();
				return r.width > 0 && r.right > document.documentElement.clientWidth + 1 && !e.closest("pre");
			}).map(e => e.tagName + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : "")).slice(0, 5))`, &wide)
			if wide != "[]" {
				t.Errorf("%s at %s width: wider than the window: %v", s.name, v.name, wide)
			}
			s.br.NoXSS()
			if c := s.br.CSPViolations(); len(c) != 0 {
				t.Errorf("%s: our own page broke its policy: %q", s.name, c)
			}
			path := filepath.Join(dir, "web-"+s.name+"-"+v.name+".png")
			s.br.Screenshot(path)
			png, err := os.ReadFile(path)
			if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
				t.Fatalf("%s is no PNG: %v", path, err)
			}
			if !strings.HasPrefix(dir, os.TempDir()) {
				t.Logf("wrote %s (%d bytes)", path, len(png))
			}
		}
	}
}
