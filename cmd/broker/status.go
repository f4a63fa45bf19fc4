package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"acpbroker/broker"
	"acpbroker/config"
	"acpbroker/internal/brokersock"
	"acpbroker/internal/bytesize"
)

// statusAskTimeout bounds asking a running broker for its status.
const statusAskTimeout = 10 * time.Second

// statusCmd is `broker status`: it asks the broker running with the
// configuration's state.dir, on its socket there, what it is doing, and
// prints it as text or as one JSON document (broker.Status).
func statusCmd(ctx context.Context, in invocation) int {
	fs := in.flags()
	configPath := fs.String("config", "", "TOML configuration `file` (for state.dir)")
	asJSON := fs.Bool("json", false, "one JSON document instead of text")
	if code, ok := in.parse(fs); !ok {
		return code
	}
	cfg, err := config.Load(*configPath, in.environ)
	if err != nil {
		fmt.Fprintln(in.stderr, "broker:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, statusAskTimeout)
	defer cancel()
	var st broker.Status
	if err := brokersock.AskStatus(ctx, cfg.State.Dir, &st); err != nil {
		if errors.Is(err, brokersock.ErrNoSocket) {
			fmt.Fprintf(in.stderr, "broker status: no broker is running with state.dir %s: nothing answers on %s\n",
				cfg.State.Dir, filepath.Join(cfg.State.Dir, brokersock.SocketName))
			return 1
		}
		fmt.Fprintln(in.stderr, "broker status:", err)
		return 1
	}
	if *asJSON {
		if err := json.NewEncoder(in.stdout).Encode(st); err != nil {
			fmt.Fprintln(in.stderr, "broker status:", err)
			return 1
		}
		return 0
	}
	printStatus(in.stdout, st)
	return 0
}

// printStatus writes st for people: the broker, its platforms, its pool
// by profile, and a line per thread.
func printStatus(w io.Writer, st broker.Status) {
	fmt.Fprintf(w, "Broker %s, pid %d, up %s\n", st.Version, st.PID, seconds(st.UptimeSeconds))
	var platforms []string
	for _, p := range st.Platforms {
		if p.Connected {
			platforms = append(platforms, p.Name+" connected")
		} else {
			platforms = append(platforms, fmt.Sprintf("%s NOT CONNECTED (%s)", p.Name, cell(p.Problem)))
		}
	}
	fmt.Fprintf(w, "Platforms: %s\n", strings.Join(platforms, "; "))
	p := st.Pool
	fmt.Fprintf(w, "Pool: %d of %d agents live (%d busy, %d starting, %d stopping); %d prompt(s) waiting for an agent, %d queued behind a turn\n",
		p.Live, p.Max, p.Busy, p.Starting, p.Stopping, p.Waiting, p.Queued)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROFILE\tLIVE\tBUSY\tSTARTING\tWAITING\tMAX")
	for _, pr := range p.Profiles {
		name := pr.Name
		if pr.Default {
			name += " (default)"
		}
		if pr.Removed {
			name += " (removed)"
		}
		max := "-"
		if pr.Max > 0 {
			max = strconv.Itoa(pr.Max)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\n", cell(name), pr.Live, pr.Busy, pr.Starting, pr.Waiting, max)
	}
	tw.Flush()
	if len(st.Hosts) > 0 {
		fmt.Fprintf(w, "Agent hosts: %d\n", len(st.Hosts))
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  HOST\tAGENTS\tRUNNING\tCAPACITY\tMEMORY FREE\tHEARD\tLABELS\tPROFILES")
		for _, h := range st.Hosts {
			heard := seconds(h.SilentSeconds) + " ago"
			if h.Lost {
				heard = "LOST, " + heard
			}
			mem := "-"
			if h.MemoryBytes > 0 {
				mem = bytesize.Format(int64(h.MemoryAvailableBytes)) + " of " + bytesize.Format(int64(h.MemoryBytes))
			}
			labels := make([]string, 0, len(h.Labels))
			for k, v := range h.Labels {
				labels = append(labels, k+"="+v)
			}
			slices.Sort(labels)
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", cell(h.Name), h.Agents, h.Running, h.Capacity, mem, heard,
				cell(strings.Join(labels, ",")), cell(strings.Join(h.Profiles, ",")))
		}
		tw.Flush()
	}
	if len(st.Threads) == 0 {
		fmt.Fprintln(w, "No thread has an agent or a turn.")
		return
	}
	fmt.Fprintf(w, "Threads: %d\n", len(st.Threads))
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PLATFORM\tTHREAD\tCHANNEL\tSTARTER\tPROFILE\tPID\tMEMORY\tCPU\tUPTIME\tTURN\tQUEUED")
	for _, t := range st.Threads {
		pid, mem, cpu, up := "-", "-", "-", "-"
		if a := t.Agent; a != nil {
			pid, up = strconv.Itoa(a.PID), seconds(a.UptimeSeconds)
			if a.Host != "" {
				pid = cell(a.Host) + ":" + pid
			}
			if a.TakenOver {
				up += " (taken over)"
			}
			switch {
			case a.UsageError != "":
				mem = "unknown"
			case a.MemoryMaxBytes > 0:
				mem = bytesize.Format(a.MemoryBytes) + " of " + bytesize.Format(a.MemoryMaxBytes)
			default:
				mem = bytesize.Format(a.MemoryBytes)
			}
			if a.CPUSeconds != nil {
				cpu = cpuTime(*a.CPUSeconds)
			}
		}
		turn := "-"
		if t.Turn != nil {
			turn = fmt.Sprintf("%s for %s", t.Turn.State, seconds(t.Turn.AgeSeconds))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", cell(t.Platform), cell(t.Thread), cell(t.Channel), cell(t.Starter),
			cell(t.Profile), pid, mem, cpu, up, turn, t.Queued)
	}
	tw.Flush()
}

// seconds says a length of time to the second: "4s", "25m3s", "3h2m5s".
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// cpuTime says CPU time to the millisecond under a second, to the tenth
// of a second under a minute, to the second above.
func cpuTime(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
