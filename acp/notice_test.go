package acp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// An agent that floods requests the broker answers at once (unknown
// methods, a batch, an unreadable id, permission requests with no turn
// to ask) while it reads nothing costs the
// broker a bounded number of goroutines: answers wait for room in the
// writer's queue up to maxWaitingNotices at a time and one second each;
// the rest are counted as unsent. Once the agent reads again, what was
// queued reaches it, and the Conn closes at once.
func TestConn_AnswersToAnAgentThatReadsNothingAreBounded(t *testing.T) {
	agentOutR, agentOutW := io.Pipe() // agent stdout -> conn
	connOutR, connOutW := io.Pipe()   // conn -> agent stdin, unread
	c := NewConn(agentOutR, connOutW, Options{Logger: zerolog.Nop()})
	base := runtime.NumGoroutine()
	const flood = 5000
	for i := range flood {
		if i%2 == 0 {
			fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","id":%d,"method":"no/such"}`+"\n", i)
		} else {
			fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","id":%d,"method":"session/request_permission","params":{"sessionId":"none","toolCall":{"toolCallId":"t"},"options":[]}}`+"\n", i)
		}
	}
	fmt.Fprint(agentOutW, `[{"jsonrpc":"2.0","id":"b1","method":"x"},{"jsonrpc":"2.0","id":"b2","method":"y"}]`+"\n")
	fmt.Fprint(agentOutW, `{"jsonrpc":"2.0","id":{"odd":1},"method":"z"}`+"\n")
	const answers = flood + 3
	// What cannot wait is counted at once; what waits gives up after a
	// second. In the queue stay outboxSize answers, and one the writer
	// holds.
	peak := 0
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().UnsentAnswers < answers-outboxSize-1 {
		peak = max(peak, runtime.NumGoroutine())
		if time.Now().After(deadline) {
			t.Fatalf("after 10s %d of %d answers counted unsent, %d goroutines (%d at the start)", c.Stats().UnsentAnswers, answers, runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A waiting answer's goroutine is counted out just before it ends: on
	// a busy machine as many again may be ending, not yet gone. Without
	// the bound the flood holds one for each of its 5000 answers.
	if peak > base+2*maxWaitingNotices+16 {
		t.Errorf("%d goroutines at the peak of the flood, %d at the start: want at most %d waiting answers (and as many ending)", peak, base, maxWaitingNotices)
	}
	if got := c.Stats().UnsentAnswers; got != answers-outboxSize-1 {
		t.Errorf("%d answers unsent, want %d (all but the queue's %d and the writer's one)", got, answers-outboxSize-1, outboxSize)
	}
	// The agent reads again: the queued answers are whole answers.
	r := bufio.NewReader(connOutR)
	for range outboxSize + 1 {
		line, err := r.ReadString('\n')
		if err != nil || !strings.Contains(line, `"error"`) && !strings.Contains(line, `"cancelled"`) {
			t.Fatalf("a queued answer reads %q, %v", line, err)
		}
	}
	agentOutW.Close()
	connOutR.Close()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits 5s after the flood")
	}
}

// An agent's junk and refused requests are each counted, but they add at
// most agentWarnBurst lines a second to the broker's log: an agent cannot
// flood it (and through it the journal's rate limit, which would drop the
// broker's other lines too).
func TestConn_AnAgentCannotFloodTheLog(t *testing.T) {
	var log lockedBuffer
	agentOutR, agentOutW := io.Pipe()
	c := NewConn(agentOutR, nopWriteCloser{io.Discard}, Options{Logger: zerolog.New(&log)})
	start := time.Now()
	const junk = 2000
	for i := range junk {
		fmt.Fprintf(agentOutW, "junk line %d\n", i)
	}
	for i := range junk {
		fmt.Fprintf(agentOutW, `{"jsonrpc":"2.0","id":{"odd":%d},"method":"z"}`+"\n", i)
	}
	agentOutW.Close()
	deadline := time.Now().Add(10 * time.Second)
	for st := c.Stats(); st.JunkLines != junk || st.InvalidRequests != junk; st = c.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("counted %d junk lines and %d invalid requests, want %d each", st.JunkLines, st.InvalidRequests, junk)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	c.Close()
	lines := strings.Count(log.String(), "\n")
	if most := agentWarnBurst * (int(took/time.Second) + 1); lines > most {
		t.Errorf("%d log lines for %d bad messages in %v, want at most %d", lines, 2*junk, took, most)
	}
	if lines == 0 {
		t.Error("nothing logged: the first bad messages must still be said")
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A message still queued when the broker closes the agent's input to
// stop it is dropped without a warning (the stop is routine); a write
// the agent's side refuses (it closed its end) is warned of. Either
// way the Conn says the agent is gone.
func TestConn_AWriteAfterTheInputWasClosedIsNoWarning(t *testing.T) {
	for _, tc := range []struct {
		name string
		shut func(r, w *os.File)
		warn bool
	}{
		{"closed by the broker", func(_, w *os.File) { w.Close() }, false},
		{"closed by the agent", func(r, _ *os.File) { r.Close() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log lockedBuffer
			agentOutR, agentOutW := io.Pipe()
			defer agentOutW.Close()
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer inR.Close()
			defer inW.Close()
			c := NewConn(agentOutR, inW, Options{Logger: zerolog.New(&log)})
			defer c.Close()
			tc.shut(inR, inW)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c.CancelSession("s1") // a notification: written, or not, in the background
			for !strings.Contains(log.String(), "write") {
				if ctx.Err() != nil {
					t.Fatalf("the failed write was never noticed; log: %s", log.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			if _, err := c.Start(ctx, "session/new", map[string]any{}); !errors.Is(err, ErrAgentGone) {
				t.Errorf("a request after the failed write: %v, want ErrAgentGone", err)
			}
			if warned := strings.Contains(log.String(), `"level":"warn"`); warned != tc.warn {
				t.Errorf("warned %v, want %v; log: %s", warned, tc.warn, log.String())
			}
		})
	}
}
