// Command fakeagent is the scriptable ACP agent of package
// internal/fakeagent as a program: the broker's demo agent, and the real
// subprocess its tests drive.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"acpbroker/internal/fakeagent"
)

func main() {
	var opts fakeagent.Options
	flag.BoolVar(&opts.LoadSession, "load-session", false, "advertise and serve session/load")
	flag.StringVar(&opts.AuthMethod, "auth", "", "require authenticate with this method id")
	flag.BoolVar(&opts.StringIDs, "string-ids", false, "use string ids for the agent's own requests")
	flag.BoolVar(&opts.NoExitOnEOF, "no-exit-on-eof", false, "keep running after stdin closes")
	flag.BoolVar(&opts.JunkAtStart, "junk-at-start", false, "print non-JSON lines before anything")
	flag.BoolVar(&opts.NoImages, "no-images", false, "advertise that prompts may not carry images")
	flag.BoolVar(&opts.MCPHTTP, "mcp-http", false, "advertise MCP servers over http")
	flag.BoolVar(&opts.MCPSSE, "mcp-sse", false, "advertise MCP servers over sse")
	flag.BoolVar(&opts.ConfigOptions, "config-options", false, "offer configuration options: model, mode, a boolean")
	flag.BoolVar(&opts.Modes, "modes", false, "offer the legacy session modes")
	flag.BoolVar(&opts.Commands, "commands", false, "offer slash commands")
	flag.BoolVar(&opts.ListSessions, "list-sessions", false, "advertise and serve session/list")
	flag.BoolVar(&opts.ResumeSession, "resume-session", false, "advertise and serve session/resume")
	flag.BoolVar(&opts.CloseSession, "close-session", false, "advertise and serve session/close")
	flag.BoolVar(&opts.ForkSession, "fork-session", false, "advertise and serve session/fork")
	flag.IntVar(&opts.ListPage, "list-page", 0, "sessions in one page of session/list (0: all)")
	flag.StringVar(&opts.SessionsDir, "sessions-dir", "", "keep every cwd's sessions in this directory, not in <cwd>/.fakeagent")
	flag.DurationVar(&opts.InitDelay, "init-delay", 0, "answer initialize after this long")
	flag.DurationVar(&opts.NewSessionDelay, "new-delay", 0, "answer session/new after this long")
	models := flag.String("models", "", "the models offered, comma-separated (default fake-small,fake-large,fake-huge)")
	earlyFlood := flag.String("early-flood", "", "LINES:KIB:IDS: before answering session/new, send LINES updates of KIB KiB for each of IDS sessions that never exist")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	child := flag.Bool("child-ignore-term", false, "be a child that ignores SIGTERM and never exits")
	probe := flag.Bool("probe", false, "no agent: try each argument as the probe command would (a terminal's command), print what happened, exit")
	flag.Parse()
	if *probe {
		for _, what := range flag.Args() {
			fmt.Println(what, fakeagent.Probe(what))
		}
		return
	}
	if *child || *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	// Like Node-based agents, outlive a closed stdout or stderr instead of
	// dying of SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	// A registered signal keeps the runtime from calling a process that
	// only waits a deadlock.
	hold := make(chan os.Signal, 1)
	signal.Notify(hold, syscall.SIGUSR1)
	if *child {
		for range hold {
		}
	}
	if *models != "" {
		opts.Models = strings.Split(*models, ",")
	}
	if *earlyFlood != "" {
		f := &opts.EarlyFlood
		if _, err := fmt.Sscanf(*earlyFlood, "%d:%d:%d", &f.Lines, &f.Bytes, &f.IDs); err != nil {
			fmt.Fprintln(os.Stderr, "fakeagent: -early-flood wants LINES:KIB:IDS:", err)
			os.Exit(2)
		}
		f.Bytes <<= 10
	}
	opts.Executable, _ = os.Executable()
	opts.PID = os.Getpid()
	os.Exit(fakeagent.Serve(context.Background(), os.Stdin, os.Stdout, os.Stderr, opts))
}
