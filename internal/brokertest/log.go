package brokertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Log is a broker's output (JSON log lines): written whole to a file,
// with the latest bytes kept in memory for failure reports. Safe for
// concurrent use.
type Log struct {
	path string

	mu   sync.Mutex
	f    *os.File
	tail []byte
	max  int
}

func newLog(path string, keep int) (*Log, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &Log{path: path, f: f, max: keep}, nil
}

// Write implements io.Writer.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tail = append(l.tail, p...)
	if len(l.tail) > 2*l.max {
		l.tail = append(l.tail[:0:0], l.tail[len(l.tail)-l.max:]...)
	}
	if l.f == nil {
		return len(p), nil
	}
	return l.f.Write(p)
}

func (l *Log) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// Path is the file holding the whole log.
func (l *Log) Path() string { return l.path }

// Tail returns up to the last n bytes written.
func (l *Log) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.tail
	if len(s) > n {
		return "…" + string(s[len(s)-n:])
	}
	return string(s)
}

// Lines returns the JSON log lines that match (nil: all), decoded, in
// order. Lines that are not JSON are skipped.
func (l *Log) Lines(match func(map[string]any) bool) []map[string]any {
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if match == nil || match(line) {
			out = append(out, line)
		}
	}
	return out
}

// Grep returns the raw lines containing every one of the strings.
func (l *Log) Grep(all ...string) []string {
	f, err := os.Open(l.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		for _, s := range all {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// Await polls the log until a line contains every one of the strings
// and returns the first such line; on ctx's end it returns the cause.
func (l *Log) Await(ctx context.Context, all ...string) (string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if lines := l.Grep(all...); len(lines) > 0 {
			return lines[0], nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for a log line with %q: %w", all, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Field returns field key of the first line whose message is msg ("" if
// none).
func (l *Log) Field(msg, key string) string {
	for _, line := range l.Lines(func(m map[string]any) bool { return m["message"] == msg }) {
		if v, ok := line[key].(string); ok {
			return v
		}
	}
	return ""
}
