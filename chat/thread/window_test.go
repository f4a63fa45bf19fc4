package thread

import (
	"testing"
	"time"
)

// Streaming updates keep their pace; the final view goes at once unless
// the platform's window (Discord's: 5 calls per 5s) is full; no sixth
// call in any 5s.
func TestWindow_PaceForUpdatesRoomForTheFinalView(t *testing.T) {
	w := window{burst: 5, per: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	pace := 1250 * time.Millisecond
	if d := w.wait(t0, pace, false); d != 0 {
		t.Fatalf("first call waits %s", d)
	}
	w.add(t0)
	if d := w.wait(t0.Add(200*time.Millisecond), pace, false); d != 1050*time.Millisecond {
		t.Fatalf("update 200ms after a call waits %s, want 1.05s", d)
	}
	if d := w.wait(t0.Add(200*time.Millisecond), pace, true); d != 0 {
		t.Fatalf("final view waits %s, want 0", d)
	}
	for i := 1; i < 5; i++ {
		w.add(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	if d := w.wait(t0.Add(time.Second), pace, true); d != 4*time.Second {
		t.Fatalf("sixth call 1s after the first waits %s, want 4s", d)
	}
}
