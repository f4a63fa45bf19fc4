package broker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"acpbroker/config"
	"acpbroker/internal/agenttest"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

// loadText loads a configuration written as text, with PATH holding the
// fake agent's directory.
func loadText(t *testing.T, text string, environ ...string) (*config.Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Load(path, append(environ, "PATH="+filepath.Dir(fakeAgent)))
}

// writeConfigArgs writes a configuration for the fake agent with args,
// plus extra TOML tables, and returns its path: the console, JSON logs,
// agents sandboxed as the default has them (as agenttest.AgentUser when
// the test runs as root), the metrics on a free port.
func writeConfigArgs(t *testing.T, args []string, extra string) string {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	dir := t.TempDir()
	user := agenttest.AgentUser()
	if user != "" {
		agenttest.Traversable(t, dir)
	}
	text := fmt.Sprintf("[log]\nformat = \"json\"\nlevel = \"warn\"\n[agent]\ncommand = %q\nargs = [%s]\ncwd = %q\nrun_as_user = %q\n[state]\ndir = %q\n[http]\nlisten = \"127.0.0.1:0\"\n%s\n",
		fakeAgent, strings.Join(quoted, ", "), filepath.Join(dir, "work"), user, filepath.Join(dir, "state"), extra)
	path := filepath.Join(dir, "broker.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tomlOf renders keys ("table.key" = TOML value) as tables.
func tomlOf(values map[string]string) string {
	tables := map[string][]string{}
	for k, v := range values {
		table, key, _ := strings.Cut(k, ".")
		tables[table] = append(tables[table], key+" = "+v)
	}
	var b strings.Builder
	for _, name := range sortedKeys(tables) {
		fmt.Fprintf(&b, "[%s]\n%s\n", name, strings.Join(tables[name], "\n"))
	}
	return b.String()
}

// testLog is the test's log, from warn up.
func testLog(t *testing.T) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
}

// openBroker opens a broker of cfg (its log the test's, unless opts
// says), stopped at the test's cleanup.
func openBroker(t *testing.T, cfg *config.Config, opts Options) *Broker {
	t.Helper()
	if opts.Stdin == nil {
		opts.Stdin, opts.Stdout = strings.NewReader(""), io.Discard
	}
	b, err := Open(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop(context.Background()) })
	return b
}
