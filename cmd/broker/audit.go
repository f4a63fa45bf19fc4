package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"acpbroker/broker"
	"acpbroker/config"
	"acpbroker/internal/brokersock"
	"acpbroker/store"
)

// auditLockWait is how long `broker audit` waits for the state file: a
// running broker holds it for as long as it runs, so this only rides out
// a broker that is stopping.
const auditLockWait = 2 * time.Second

// auditAskTimeout bounds asking a running broker for its audit trail.
const auditAskTimeout = 30 * time.Second

// audit is `broker audit`: it prints the permission decisions kept in the
// state directory of the configuration, oldest first, as a table or as
// JSON lines. It reads a stopped broker's state file; a running broker
// holds that file exclusively, and is asked on its socket there instead.
func audit(in invocation) int {
	stdout, stderr := in.stdout, in.stderr
	fs := in.flags()
	configPath := fs.String("config", "", "TOML configuration `file` (for state.dir)")
	since := fs.Duration("since", 0, "only decisions of the last `duration` (e.g. 24h; default: all kept)")
	thread := fs.String("thread", "", "only the decisions of thread `id` (discord:123…, or 123… on any platform)")
	asJSON := fs.Bool("json", false, "one JSON object per line instead of a table")
	schedules := fs.Bool("schedules", false, "the schedules' runs and their outcomes instead of the permission decisions")
	schedule := fs.String("schedule", "", "with --schedules: only the runs of the schedule `name`")
	if code, ok := in.parse(fs); !ok {
		return code
	}
	if *since < 0 {
		in.fail(fs, fmt.Sprintf("--since %s is negative", *since))
		return 2
	}
	cfg, err := config.Load(*configPath, in.environ)
	if err != nil {
		fmt.Fprintln(stderr, "broker:", err)
		return 2
	}
	if *schedules {
		return auditRuns(cfg, *since, *schedule, *asJSON, stdout, stderr)
	}
	// A thread named as its platform knows it ("123…", as the audit
	// trail named Discord's before it named their platforms) is that
	// thread on any platform: selected here, not by the store.
	f := store.DecisionFilter{Thread: *thread}
	_, _, qualified := broker.SplitThreadID(*thread)
	if !qualified {
		f.Thread = ""
	}
	if *since > 0 {
		f.Since = time.Now().Add(-*since)
	}
	list, err := store.ReadDecisions(cfg.State.Dir, f, auditLockWait)
	if errors.Is(err, store.ErrLocked) {
		ctx, cancel := context.WithTimeout(context.Background(), auditAskTimeout)
		list, err = brokersock.Ask(ctx, cfg.State.Dir, f)
		cancel()
		if errors.Is(err, brokersock.ErrNoSocket) {
			fmt.Fprintf(stderr, "broker audit: state.dir %s %v, and %v; the same decisions are in its log (message \"permission decided\")\n", cfg.State.Dir, store.ErrLocked, err)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "broker audit:", err)
		return 1
	}
	if *thread != "" && !qualified {
		list = slices.DeleteFunc(list, func(d store.Decision) bool {
			_, own, ok := broker.SplitThreadID(d.Thread)
			return d.Thread != *thread && (!ok || own != *thread)
		})
	}
	if *asJSON {
		return jsonLines(stdout, stderr, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "No permission decisions recorded.")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTHREAD\tPROFILE\tTOOL\tKIND\tOUTCOME\tOPTION\tBY")
	for _, d := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Time.UTC().Format(time.RFC3339), cell(d.Thread), cell(d.Profile),
			cell(d.Tool), cell(d.ToolKind), d.Outcome, cell(option(d)), cell(decider(d)))
	}
	tw.Flush()
	return 0
}

// option is the option chosen, e.g. "allow (allow_once)".
func option(d store.Decision) string {
	if d.OptionID == "" {
		return ""
	}
	return fmt.Sprintf("%s (%s)", d.OptionID, d.OptionKind)
}

// decider says who decided: "201 (alice)", "rule 1 (kind read)",
// "turn.permission_mode (allow)", "timeout".
func decider(d store.Decision) string {
	by := d.By
	if by == "" {
		by = d.Via
	}
	if d.ByName != "" {
		by += " (" + d.ByName + ")"
	}
	return by
}

// cell makes a value one table cell: an agent's title may hold tabs or
// newlines, which would forge columns or lines; "-" for nothing.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// auditRuns is `broker audit --schedules`: the schedules' runs kept in
// state.dir, oldest first, as a table or as JSON lines; a running
// broker is asked on its socket.
func auditRuns(cfg *config.Config, since time.Duration, schedule string, asJSON bool, stdout, stderr io.Writer) int {
	f := store.RunFilter{Schedule: schedule}
	if since > 0 {
		f.Since = time.Now().Add(-since)
	}
	list, err := store.ReadScheduleRuns(cfg.State.Dir, f, auditLockWait)
	if errors.Is(err, store.ErrLocked) {
		ctx, cancel := context.WithTimeout(context.Background(), auditAskTimeout)
		list, err = brokersock.AskRuns(ctx, cfg.State.Dir, f)
		cancel()
	}
	if err != nil {
		fmt.Fprintln(stderr, "broker audit:", err)
		return 1
	}
	if asJSON {
		return jsonLines(stdout, stderr, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "No schedule runs recorded.")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DUE\tSCHEDULE\tBY\tTHREAD\tOUTCOME\tENDED\tCAUSE")
	for _, r := range list {
		ended := "-"
		if !r.Ended.IsZero() {
			ended = r.Ended.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Due.UTC().Format(time.RFC3339), cell(r.Schedule), cell(r.By), cell(r.Thread),
			r.Outcome, ended, cell(r.Cause))
	}
	tw.Flush()
	return 0
}

// jsonLines writes list to stdout as JSON, one record a line, and returns
// the command's exit status.
func jsonLines[T any](stdout, stderr io.Writer, list []T) int {
	enc := json.NewEncoder(stdout)
	for _, r := range list {
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(stderr, "broker audit:", err)
			return 1
		}
	}
	return 0
}
