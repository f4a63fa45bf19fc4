package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// call runs the broker with args and returns its exit status and output.
func call(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, nil, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The list of commands names every command with its line.
func checkList(t *testing.T, how, out string) {
	t.Helper()
	for _, c := range commands {
		if !regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.name) + ` +` + regexp.QuoteMeta(c.line) + `$`).MatchString(out) {
			t.Errorf("%s: the list lacks %q with its line:\n%s", how, c.name, out)
		}
	}
}

// broker, -h, --help and help list every command with a line each, on
// stdout, and exit 0; each command's -h, --help and help COMMAND print its
// usage with its flags and exit 0.
func TestHelp_ExitsZeroAndListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{nil, {"-h"}, {"--help"}, {"-help"}, {"help"}, {"help", "--help"}} {
		code, out, errOut := call(args...)
		how := "broker " + strings.Join(args, " ")
		if code != 0 || errOut != "" {
			t.Fatalf("%s: exit %d, stderr %q", how, code, errOut)
		}
		if len(args) == 2 {
			if !strings.HasPrefix(out, "Usage: broker help [COMMAND]") {
				t.Errorf("%s: %q", how, out)
			}
			continue
		}
		checkList(t, how, out)
	}
	if len(commands) != 7 {
		t.Errorf("%d commands; the test knows 7", len(commands))
	}
	flags := map[string][]string{
		"run":          {"-config file", "-platform"},
		"check-config": {"-config file", "-platform"},
		"host":         {"-config file"},
		"status":       {"-config file", "-json"},
		"audit":        {"-config file", "-json", "-since duration", "-thread id"},
		"version":      nil,
		"help":         nil,
	}
	for _, c := range commands {
		want, known := flags[c.name]
		if !known {
			t.Errorf("command %q is not tested", c.name)
			continue
		}
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			code, out, errOut := call(args...)
			how := "broker " + strings.Join(args, " ")
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage: "+c.synopsis+"\n\n"+c.about) {
				t.Errorf("%s: exit %d, stderr %q, stdout:\n%s", how, code, errOut, out)
			}
			for _, f := range want {
				if !strings.Contains(out, "\n  "+f) {
					t.Errorf("%s: the usage lacks the flag %q:\n%s", how, f, out)
				}
			}
			if len(want) == 0 && strings.Contains(out, "Flags:") {
				t.Errorf("%s: flags listed for a command that has none:\n%s", how, out)
			}
		}
	}
}

// A wrong flag, an argument a command does not take, or an unknown
// command exits 2 with one line saying what is wrong, then the usage, on
// stderr alone.
func TestHelp_AWrongCallExitsTwoWithAReasonAndTheUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		reason string
		usage  string // how the usage after it begins
	}{
		{[]string{"frobnicate"}, `broker: unknown command "frobnicate"`, "ACP Broker connects"},
		{[]string{"--nope"}, "broker run: flag provided but not defined: -nope", "Usage: broker [run]"},
		{[]string{"run", "--nope"}, "broker run: flag provided but not defined: -nope", "Usage: broker [run]"},
		{[]string{"run", "extra"}, `broker run: unexpected argument "extra"`, "Usage: broker [run]"},
		{[]string{"check-config", "--config"}, "broker check-config: flag needs an argument: -config", "Usage: broker check-config"},
		{[]string{"status", "--nope"}, "broker status: flag provided but not defined: -nope", "Usage: broker status"},
		{[]string{"status", "now"}, `broker status: unexpected argument "now"`, "Usage: broker status"},
		{[]string{"audit", "--since", "yesterday"}, `broker audit: invalid value "yesterday" for flag -since`, "Usage: broker audit"},
		{[]string{"audit", "--since", "-1h"}, "broker audit: --since -1h0m0s is negative", "Usage: broker audit"},
		{[]string{"version", "--short"}, "broker version: flag provided but not defined: -short", "Usage: broker version"},
		{[]string{"version", "now"}, `broker version: unexpected argument "now"`, "Usage: broker version"},
		{[]string{"help", "frobnicate"}, `broker help: unknown command "frobnicate"`, "ACP Broker connects"},
		{[]string{"help", "run", "audit"}, `broker help: unexpected argument "audit"`, "Usage: broker help"},
		{[]string{"help", "--nope"}, `broker help: unexpected argument "--nope"`, "Usage: broker help"},
	} {
		code, out, errOut := call(tc.args...)
		how := "broker " + strings.Join(tc.args, " ")
		first, rest, _ := strings.Cut(errOut, "\n")
		if code != 2 || out != "" || !strings.HasPrefix(first, tc.reason) || !strings.HasPrefix(rest, tc.usage) {
			t.Errorf("%s: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q, then the usage", how, code, out, errOut, tc.reason)
		}
	}
}

// broker version says the version, the revision and the time of the
// commit from the binary's build information, and the Go version; make
// build stamps the version (git describe) and, from a git checkout, the
// revision. A checkout that is a git worktree (.git a file) gets no VCS
// information from go build, and says "commit unknown".
func TestVersion_SaysTheBuildInformation(t *testing.T) {
	code, out, _ := call("version")
	if code != 0 || !regexp.MustCompile(`^acp-broker \S+ \(commit \S+.*; go1\.\d+.*\)\n$`).MatchString(out) {
		t.Fatalf("version: exit %d, %q", code, out)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	build := exec.Command("make", "-C", root, "BIN="+bin, bin+"/broker")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, b)
	}
	b, err := exec.Command(filepath.Join(bin, "broker"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	describe, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): %s", err, got)
	}
	if want := "acp-broker " + strings.TrimSpace(string(describe)) + " ("; !strings.HasPrefix(got, want) {
		t.Errorf("make build's broker says %q, want it to begin %q", got, want)
	}
	if fi, err := os.Lstat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Logf("a git worktree, where go build records no revision: %s", got)
		return
	}
	head, err := exec.Command("git", "-C", root, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	rev, unix, _ := strings.Cut(strings.TrimSpace(string(head)), " ")
	secs, err := strconv.ParseInt(unix, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Unix(secs, 0).UTC().Format(time.RFC3339)
	if !strings.Contains(got, "(commit "+rev+", "+when) {
		t.Errorf("make build's broker says %q, want the revision %s and its time %s", got, rev, when)
	}
}
