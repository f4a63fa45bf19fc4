package broker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/config"
	"acpbroker/internal/agenttest"
)

// The sandbox hides what the broker's files were at its start: a reload
// that adds an API token whose token_file is not among them (nor inside
// one) is refused, naming the key, since its agents would be shown that
// file until a restart; one kept beside a token file hidden since the
// start is taken.
func TestReload_ATokenFileTheSandboxDoesNotHideIsRefused(t *testing.T) {
	dir := t.TempDir()
	agenttest.Traversable(t, dir)
	secrets, elsewhere := filepath.Join(dir, "secrets"), filepath.Join(dir, "elsewhere")
	for _, d := range []string{secrets, elsewhere} {
		os.MkdirAll(d, 0o755)
	}
	write := func(path string) string {
		os.WriteFile(path, []byte("tok-"+filepath.Base(path)+"-0123456789abcdef"), 0o600)
		return path
	}
	first, beside, outside := write(filepath.Join(secrets, "ci")), write(filepath.Join(secrets, "ops")), write(filepath.Join(elsewhere, "ops"))
	base := fmt.Sprintf("[agent]\ncommand = %q\ncwd = %q\nrun_as_user = %q\n[state]\ndir = %q\n[http]\nlisten = \"\"\n[api]\nlisten = \"127.0.0.1:0\"\n",
		fakeAgent, filepath.Join(dir, "work"), agenttest.AgentUser(), filepath.Join(dir, "state"))
	token := func(name, file string) string {
		return fmt.Sprintf("[[api.tokens]]\nname = %q\ntoken_file = %q\nchannels = [\"*\"]\n", name, file)
	}
	path := filepath.Join(t.TempDir(), "broker.toml") // its directory is hidden too
	if err := os.WriteFile(path, []byte(base+token("ci", first)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, []string{"PATH=" + os.Getenv("PATH")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Agent.Sandbox != "bwrap" {
		t.Fatalf("agent.sandbox = %q, want the default bwrap", cfg.Agent.Sandbox)
	}
	b := openBroker(t, cfg, Options{Logger: testLog(t), Environ: []string{"PATH=" + os.Getenv("PATH")}})

	if err := os.WriteFile(path, []byte(base+token("ci", first)+token("ops", outside)), 0o600); err != nil {
		t.Fatal(err)
	}
	res := b.prepareReload(context.Background())
	want := fmt.Sprintf("api.tokens[1].token_file = %q is not hidden from agents until a restart", outside)
	if res.err == nil || !strings.Contains(res.err.Error(), want) {
		t.Fatalf("a token file elsewhere: %v\nwant %q", res.err, want)
	}

	if err := os.WriteFile(path, []byte(base+token("ci", first)+token("ops", beside)), 0o600); err != nil {
		t.Fatal(err)
	}
	res = b.prepareReload(context.Background())
	if res.err != nil {
		t.Fatalf("a token file beside the first: %v", res.err)
	}
	// The new token is masked from then on, as the first is.
	b.applyReload(res)
	for _, f := range []string{first, beside} {
		tok, _ := os.ReadFile(f)
		if got := b.redact.String("an agent wrote " + string(tok)); strings.Contains(got, string(tok)) {
			t.Errorf("the token of %s is not masked after the reload: %q", f, got)
		}
	}
}
