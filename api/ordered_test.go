package api

import (
	"fmt"
	"testing"
	"time"
)

// The oldest entries go first: past the bound, and once older than the
// time given; an entry put again becomes the newest.
func TestOrdered_DropsTheOldestFirst(t *testing.T) {
	o := newOrdered[int]()
	t0 := time.Unix(1_000_000, 0)
	for i := range 5 {
		o.put(fmt.Sprint(i), i, t0.Add(time.Duration(i)*time.Second))
	}
	o.put("0", 10, t0.Add(10*time.Second)) // used again: the newest
	o.trim(time.Time{}, 3)
	for _, k := range []string{"1", "2"} {
		if _, _, ok := o.get(k); ok {
			t.Errorf("%s, among the oldest, was kept", k)
		}
	}
	for _, k := range []string{"3", "4", "0"} {
		if _, _, ok := o.get(k); !ok {
			t.Errorf("%s, among the newest, was dropped", k)
		}
	}
	o.trim(t0.Add(5*time.Second), 100)
	if v, _, ok := o.get("0"); o.len() != 1 || !ok || v != 10 {
		t.Errorf("after dropping those put before t0+5s: %d left, 0 = %d (%v)", o.len(), v, ok)
	}
	o.delete("0")
	if o.len() != 0 || o.order.Len() != 0 {
		t.Errorf("%d left after the last was deleted", o.len())
	}
}

// Headless threads past maxThreads cost the same to add as the first:
// the oldest is found at once, not by a scan of every thread.
func BenchmarkServer_UseThreadAtTheBound(b *testing.B) {
	s := &Server{threads: newOrdered[string]()}
	now := time.Now()
	for i := range maxThreads {
		s.useThreadLocked(fmt.Sprint("t-", i), "ci", now)
	}
	b.ResetTimer()
	for i := range b.N {
		s.useThreadLocked(fmt.Sprint("u-", i), "ci", now)
	}
}
