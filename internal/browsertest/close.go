package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chromedp/chromedp"
)

// Close stops the browser: a graceful close, bounded, then the allocator's
// kill and wait for the main process, then SIGKILL to any process of it
// still there (Chromium's helpers outlive a killed parent), until none has
// been seen for a few looks in a row. A process that survives that fails
// the test. New registers it with t.Cleanup; calling it again does nothing.
func (b *Browser) Close() {
	b.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(b.ctx, closeTimeout)
		err := chromedp.Cancel(ctx)
		cancel()
		b.cancelTab()
		b.cancelExec() // waits for the main process
		b.cancelLife(errors.New("the browser was closed"))
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			b.t.Logf("closing the browser: %v", err)
		}
		if left := b.reap(); len(left) > 0 {
			b.t.Errorf("browser processes %v outlived Close", left)
		}
	})
}

// reap kills what is left of the browser until nothing has been seen for a
// few looks in a row, and returns the processes still there when it gives up.
func (b *Browser) reap() []int {
	const (
		quietLooks = 3
		look       = 20 * time.Millisecond
		limit      = 5 * time.Second
	)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(look)
	defer tick.Stop()
	for quiet := 0; quiet < quietLooks; {
		left := b.processes()
		if len(left) == 0 {
			quiet++
		} else {
			quiet = 0
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return b.processes()
		}
	}
	return nil
}

// processes lists the live processes of this browser: those in its process
// group, and those that name its profile (Chromium gives every helper
// --user-data-dir, and the directory is this test's alone). Zombies, dead
// and waiting for their parent to reap them, are not counted.
func (b *Browser) processes() []int {
	pgid := b.PID()
	want := []byte("--user-data-dir=" + b.profile)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		state, group, ok := procStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if pgid != 0 && group == pgid {
			out = append(out, pid)
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// procStat reads a process's state and process group from /proc/pid/stat.
func procStat(pid int) (state byte, pgid int, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 3 {
		return 0, 0, false
	}
	pgid, err = strconv.Atoi(fields[2])
	if err != nil {
		return 0, 0, false
	}
	return fields[0][0], pgid, true
}

func unquote(data []byte, out any) error { return json.Unmarshal(data, out) }

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}
