package acp

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkConn_SessionUpdates measures session/update notifications
// through the connection: read from the agent's stdout, parsed, routed to
// the session's subscriber and received there. Run with -cpu 1 for the
// per-core figure; b.N updates make one op each.
func BenchmarkConn_SessionUpdates(b *testing.B) {
	const batch = 1000
	var lines bytes.Buffer
	for i := range batch {
		fmt.Fprintf(&lines, `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"S1","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"chunk %d of the answer, about as long as a model's token burst"}}}}`+"\n", i)
	}
	agentOut, toConn := io.Pipe()
	fromConn, agentIn := io.Pipe()
	go io.Copy(io.Discard, fromConn)
	c := NewConn(agentOut, agentIn, Options{Logger: zerolog.Nop(), UpdateQueue: 4096})
	defer func() {
		c.Close()
		toConn.Close()
	}()
	c.register("S1", b.TempDir())
	sub, err := c.Subscribe("S1", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	// The agent writes a batch when the previous one has been received, so
	// the bounded queue never overflows and nothing is dropped.
	next := make(chan struct{}, 1)
	next <- struct{}{}
	go func() {
		for range next {
			if _, err := toConn.Write(lines.Bytes()); err != nil {
				return
			}
		}
	}()
	defer close(next)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		<-sub.Updates()
		if i%batch == batch-1 {
			next <- struct{}{}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "updates/s")
	if s := c.Stats(); s.DroppedUpdates > 0 {
		b.Fatalf("%d updates dropped: the reader outran the subscriber", s.DroppedUpdates)
	}
}
