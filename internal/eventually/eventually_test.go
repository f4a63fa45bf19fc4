package eventually

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestWait_ReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var done atomic.Bool
		time.AfterFunc(time.Second, func() { done.Store(true) })
		start := time.Now()
		if !Wait(time.Minute, done.Load) {
			t.Fatal("Wait gave up on a condition that came true after 1s")
		}
		if took := time.Since(start); took < time.Second || took > time.Second+Tick {
			t.Fatalf("Wait took %s for a condition true after 1s", took)
		}
	})
}

func TestWait_GivesUpAtItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if Wait(3*time.Second, func() bool { return false }) {
			t.Fatal("Wait reported a condition that never held")
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Fatalf("Wait gave up after %s, want 3s", took)
		}
	})
}
