package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"acpbroker/internal/agenttest"
)

// Each API token's token_file is one of the broker's files, as the chat
// platforms' token files are: hidden from agents, and a path shown
// writable that holds it, a workspace that holds it or a path shown
// read-only that is its directory is refused naming both keys.
func TestSandbox_AnAPITokenFileIsHiddenAndRefusedNamingBothKeys(t *testing.T) {
	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	os.MkdirAll(secrets, 0o755)
	agenttest.Traversable(t, secrets)
	files := []string{filepath.Join(secrets, "ci"), filepath.Join(secrets, "ops")}
	for _, f := range files {
		os.WriteFile(f, []byte("tok-0123456789abcdef-"+filepath.Base(f)), 0o600)
	}
	for _, tc := range []struct {
		agent string
		want  []string
	}{
		{fmt.Sprintf("sandbox_rw = [%q]", secrets), []string{
			fmt.Sprintf("agent.sandbox_rw = %q shows api.tokens[0].token_file %q: an agent may write around it there", secrets, files[0]),
			fmt.Sprintf("agent.sandbox_rw = %q shows api.tokens[1].token_file %q", secrets, files[1])}},
		{fmt.Sprintf("cwd = %q\nper_thread_dir = false", secrets), []string{
			fmt.Sprintf("agent.cwd = %q shows api.tokens[0].token_file %q: the broker serves its agents' file requests there", secrets, files[0])}},
		{fmt.Sprintf("sandbox_ro = [%q]", secrets), []string{
			fmt.Sprintf("agent.sandbox_ro = %q is the directory of api.tokens[0].token_file, which agents are not shown", secrets)}},
		{fmt.Sprintf("sandbox_ro = [%q]", dir), nil}, // hidden there
	} {
		text := fmt.Sprintf("[agent]\ncommand = %q\nrun_as_user = %q\n%s\n[state]\ndir = %q\n", fakeAgent, agenttest.AgentUser(), tc.agent, filepath.Join(dir, "state"))
		if !strings.Contains(tc.agent, "cwd") {
			text = strings.Replace(text, "[agent]\n", fmt.Sprintf("[agent]\ncwd = %q\n", filepath.Join(dir, "work")), 1)
		}
		for i, f := range files {
			text += fmt.Sprintf("[[api.tokens]]\nname = \"t%d\"\ntoken_file = %q\nchannels = [\"*\"]\n", i, f)
		}
		cfg, err := loadText(t, text)
		if err != nil {
			t.Fatalf("%s: %v", tc.agent, err)
		}
		for _, f := range files {
			if !slices.Contains(cfg.Hidden(), f) {
				t.Errorf("%s is not among the files hidden from agents: %q", f, cfg.Hidden())
			}
		}
		problems := errors.Join(CheckSandbox(cfg)...)
		if tc.want == nil && problems != nil {
			t.Errorf("%s: refused: %v", tc.agent, problems)
		}
		for _, w := range tc.want {
			if problems == nil || !strings.Contains(problems.Error(), w) {
				t.Errorf("%s: %v\nwant %q", tc.agent, problems, w)
			}
		}
	}
}
