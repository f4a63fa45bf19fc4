package ttlcache

import (
	"fmt"
	"testing"
	"time"
)

// clock is a time a test moves by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// Past its bound the least recently used goes, a read counting as a use
// and a peek not.
func TestCache_DropsTheLeastRecentlyUsedPastItsBound(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	c := New[string, int](3, time.Minute, clk.now)
	for i, k := range []string{"a", "b", "c"} {
		c.Put(k, i)
	}
	c.Get("a")
	c.Peek("b")
	c.Put("d", 3)
	if _, ok := c.Peek("b"); ok || c.Len() != 3 {
		t.Fatalf("b, the least recently used, kept past the bound (%d entries)", c.Len())
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.Peek(k); !ok {
			t.Errorf("%s dropped", k)
		}
	}
}

// An entry is gone once it has lived its time, by the clock given: to a
// read, and from memory at the next put.
func TestCache_EntriesExpireByTheClock(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	c := New[string, int](100, time.Minute, clk.now)
	for i := range 10 {
		c.Put(fmt.Sprint(i), i)
	}
	clk.t = clk.t.Add(time.Minute - time.Nanosecond)
	if v, ok := c.Get("3"); !ok || v != 3 {
		t.Fatalf("3 read before its time: %d %v", v, ok)
	}
	clk.t = clk.t.Add(time.Nanosecond)
	if _, ok := c.Get("4"); ok {
		t.Fatal("4 read once its minute was over")
	}
	c.Put("new", 1)
	if n := c.Len(); n != 1 {
		t.Errorf("%d entries after a put once the rest expired, want 1", n)
	}
}

// An entry put with a time in the past expires that long after it, and
// one already too old is not kept.
func TestCache_PutAtATimeInThePast(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	c := New[string, string](100, time.Hour, clk.now)
	c.PutAt("recalled", "x", clk.t.Add(-50*time.Minute))
	c.PutAt("stale", "y", clk.t.Add(-2*time.Hour))
	if _, ok := c.Peek("stale"); ok || c.Len() != 1 {
		t.Fatalf("an entry older than its time was kept (%d entries)", c.Len())
	}
	clk.t = clk.t.Add(9 * time.Minute)
	if _, ok := c.Peek("recalled"); !ok {
		t.Fatal("a recalled entry dropped before its time")
	}
	clk.t = clk.t.Add(time.Minute)
	if _, ok := c.Peek("recalled"); ok {
		t.Fatal("a recalled entry kept an hour after its own time, not the put's")
	}
}

// ContainsOrPut tells a new key from one that is there.
func TestCache_ContainsOrPut(t *testing.T) {
	clk := &clock{time.Unix(1_000_000, 0)}
	c := New[string, int](10, time.Minute, clk.now)
	if c.ContainsOrPut("f", 5) || !c.ContainsOrPut("f", 6) {
		t.Fatal("ContainsOrPut does not tell a new key")
	}
	if v, _ := c.Get("f"); v != 5 {
		t.Errorf("f = %d, want the first value", v)
	}
	clk.t = clk.t.Add(time.Minute)
	if c.ContainsOrPut("f", 7) {
		t.Error("an expired key was said to be there")
	}
	c.Remove("f")
	if c.Len() != 0 {
		t.Errorf("%d entries after the last was removed", c.Len())
	}
}

// Adding past the bound costs the same as the first: the oldest is found
// at once, not by a scan of every entry.
func BenchmarkCache_PutAtTheBound(b *testing.B) {
	const n = 10000
	c := New[string, string](n, time.Hour, nil)
	for i := range n {
		c.Put(fmt.Sprint("t-", i), "ci")
	}
	b.ResetTimer()
	for i := range b.N {
		c.Put(fmt.Sprint("u-", i), "ci")
	}
}
