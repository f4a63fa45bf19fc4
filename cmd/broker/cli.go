package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// command is one of the broker's commands: its name, what it does in a
// line (for the list), what it is for in a paragraph (for its usage),
// how it is called, and what runs it.
type command struct {
	name, line, about, synopsis string
	run                         func(ctx context.Context, in invocation) int
}

// commands are the broker's commands, in the order help lists them.
var commands []command

func init() {
	commands = []command{
		{name: "run", line: "serve the chat platforms (the default: broker --config FILE)",
			synopsis: "broker [run] --config FILE [--platform NAMES]",
			about: "Serves the chat platforms of the configuration until SIGTERM or SIGINT (a second one kills every\n" +
				"agent at once); SIGHUP reloads the configuration. Exit status: 0 after a clean stop, 1 when\n" +
				"serving failed, 2 for a bad configuration.",
			run: func(ctx context.Context, in invocation) int { return serveCmd(ctx, in, false) }},
		{name: "check-config", line: "check a configuration and what it needs of this machine",
			synopsis: "broker check-config --config FILE [--platform NAMES]",
			about:    "Checks the configuration as a start would, without starting anything. Exit status: 0 if it is\nvalid, 2 otherwise (each problem named by its key).",
			run:      func(ctx context.Context, in invocation) int { return serveCmd(ctx, in, true) }},
		{name: "host", line: "run agents for the brokers of a cluster (an agent host)",
			synopsis: "broker host --config FILE",
			about: "Joins the NATS cluster of the configuration's [cluster] and runs the agents its brokers place\n" +
				"here, with this machine's profiles, sandbox, network and workspaces, until SIGTERM or SIGINT\n" +
				"(a second one kills every agent at once). Exit status: 0 after a clean stop, 1 when it failed,\n" +
				"2 for a bad configuration.",
			run: hostCmd},
		{name: "status", line: "what a running broker is doing: platforms, pool, threads and their turns",
			synopsis: "broker status [--json] --config FILE",
			about: "Asks the broker running with the configuration's state.dir, on its socket there, for its chat\n" +
				"platforms, its pool of agents and every thread with an agent or a turn. Exit status: 0, or 1\n" +
				"when no broker answers.",
			run: statusCmd},
		{name: "audit", line: "the permission decisions kept in state.dir (--schedules: the schedules' runs)",
			synopsis: "broker audit [--since DURATION] [--thread ID] [--json] --config FILE",
			about: "Prints the permission decisions kept in the configuration's state.dir, oldest first; a running\n" +
				"broker is asked on its socket there.",
			run: func(_ context.Context, in invocation) int { return audit(in) }},
		{name: "version", line: "the version, the VCS revision and the build time",
			synopsis: "broker version",
			about:    "Prints the version, the VCS revision and time of the commit it was built from, and the Go\nversion, as the binary's build information has them.",
			run:      versionCmd},
		{name: "help", line: "this list, or a command's usage: broker help COMMAND",
			synopsis: "broker help [COMMAND]",
			about:    "Lists the commands, or says how to call one.",
			run:      helpCmd},
	}
}

// lookup is the command of that name, or nil.
func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// invocation is one call of a command: its arguments after its name, and
// the program's environment and standard streams.
type invocation struct {
	cmd     *command
	args    []string
	environ []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// flags is the command's flag set; parse reads the arguments into it.
func (in *invocation) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("broker "+in.cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse says what went wrong, once
	return fs
}

// parse reads the arguments, which must all be flags. With -h or --help
// it prints the command's usage on stdout; for a wrong flag or an
// argument, one line saying what is wrong and the usage on stderr. ok is
// false then, and code the exit status: 0 for help, 2 otherwise.
func (in *invocation) parse(fs *flag.FlagSet) (code int, ok bool) {
	err := fs.Parse(in.args)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(in.stdout, in.cmd, fs)
		return 0, false
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		in.fail(fs, err.Error())
		return 2, false
	}
	return 0, true
}

// fail says in one line what is wrong with the call, then the command's
// usage, on stderr.
func (in *invocation) fail(fs *flag.FlagSet, reason string) {
	fmt.Fprintf(in.stderr, "broker %s: %s\n", in.cmd.name, reason)
	commandUsage(in.stderr, in.cmd, fs)
}

// isHelp: the argument asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// usage lists the commands, a line each.
func usage(w io.Writer) {
	fmt.Fprint(w, "ACP Broker connects chat threads to Agent Client Protocol agents.\n\n"+
		"Usage: broker COMMAND [flags]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.line)
	}
	tw.Flush()
	fmt.Fprint(w, "\nbroker COMMAND --help says how to call a command. The README's Operating section says more.\n")
}

// commandUsage says how to call c, with its flags (fs; nil: none).
func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	if fs == nil {
		return
	}
	var flags strings.Builder
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nFlags:\n%s", flags.String())
	}
}

// helpCmd is `broker help [COMMAND]`.
func helpCmd(ctx context.Context, in invocation) int {
	args := in.args
	if len(args) > 0 && isHelp(args[0]) {
		commandUsage(in.stdout, in.cmd, nil)
		return 0
	}
	switch {
	case len(args) == 0:
		usage(in.stdout)
		return 0
	case len(args) > 1 || strings.HasPrefix(args[0], "-"):
		what := args[0]
		if !strings.HasPrefix(what, "-") {
			what = args[1]
		}
		in.fail(nil, fmt.Sprintf("unexpected argument %q", what))
		return 2
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(in.stderr, "broker help: unknown command %q\n", args[0])
		usage(in.stderr)
		return 2
	}
	// The command's own --help prints its usage with its flags.
	return c.run(ctx, invocation{cmd: c, args: []string{"--help"}, environ: in.environ, stdout: in.stdout, stderr: in.stderr})
}
