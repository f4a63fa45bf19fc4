package fakehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestScript_FaultsAreTakenInOrderAndUsedUp(t *testing.T) {
	var s Script[string, int]
	s.Add(func(r string) bool { return r == "a" }, 2, 1)
	s.Add(func(string) bool { return true }, 1, 2)
	s.Add(func(string) bool { return true }, 0, 3) // nothing to inject
	var got []int
	for _, r := range []string{"b", "a", "a", "a", "b"} {
		f, ok := s.Take(r)
		if !ok {
			f = 0
		}
		got = append(got, f)
	}
	want := []int{2, 1, 1, 0, 0}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d faults still pending after all were used", n)
	}
}

func draws(d *Dice[int], n int) []Fault {
	out := make([]Fault, n)
	for i := range out {
		out[i], _ = d.Draw(i)
	}
	return out
}

func TestDice_SeedRepeatsTheDrawsAndCountsCarryOver(t *testing.T) {
	c := Chaos[int]{Seed: 7, Rate429: 0.2, RateError: 0.2, RateDrop: 0.2, ErrorStatuses: []int{500, 502}}
	var a, b Dice[int]
	a.Set(c, 503)
	b.Set(c, 503)
	da, db := draws(&a, 200), draws(&b, 200)
	for i := range da {
		if da[i] != db[i] {
			t.Fatalf("draw %d: %+v and %+v from one seed", i, da[i], db[i])
		}
	}
	n := a.Counts()
	if n.TooManyRequests == 0 || n.Drops == 0 || n.Errors[500] == 0 || n.Errors[502] == 0 || n.Errors[503] != 0 {
		t.Fatalf("counts %+v: want some of each kind, statuses as named", n)
	}
	total := n.TooManyRequests + n.Drops + n.Errors[500] + n.Errors[502]
	if total < 80 || total > 160 {
		t.Fatalf("%d of 200 failed at a rate of 0.6", total)
	}
	a.Set(Chaos[int]{}, 503)
	if f, ok := a.Draw(0); ok {
		t.Fatalf("an empty Chaos drew %+v", f)
	}
	if after := a.Counts(); after.TooManyRequests != n.TooManyRequests || after.Errors[500] != n.Errors[500] {
		t.Fatalf("counts %+v after stopping, want %+v kept", after, n)
	}
	n.Errors[500] = -1
	if a.Counts().Errors[500] == -1 {
		t.Fatal("Counts hands out the live map")
	}
}

func TestDice_DefaultsAndMatch(t *testing.T) {
	var d Dice[int]
	if f, ok := d.Draw(1); ok {
		t.Fatalf("the zero Dice drew %+v", f)
	}
	d.Set(Chaos[int]{RateError: 1, Match: func(r int) bool { return r%2 == 0 }}, 503)
	if f, ok := d.Draw(1); ok {
		t.Fatalf("an unmatched request drew %+v", f)
	}
	if f, ok := d.Draw(2); !ok || f.Status != 503 {
		t.Fatalf("drew %+v, %v; want the default status 503", f, ok)
	}
	d.Set(Chaos[int]{Rate429: 1}, 503)
	if f, _ := d.Draw(2); f.Status != http.StatusTooManyRequests || f.RetryAfter != time.Second {
		t.Fatalf("drew %+v; want 429 after the default second", f)
	}
}

func TestChanges_WaitForWakesOnNotifyAndEndsOnClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Changes
		var value atomic.Int32
		done := make(chan error, 1)
		go func() {
			done <- c.WaitFor(context.Background(), func() bool { return value.Load() == 2 }, errors.New("closed"))
		}()
		for n := int32(1); n <= 2; n++ {
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("WaitFor returned %v before the condition held", err)
			default:
			}
			value.Store(n)
			c.Notify()
		}
		synctest.Wait()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WaitFor: %v", err)
			}
		default:
			t.Fatal("WaitFor still waits after the change that made its condition hold")
		}

		closed := errors.New("closed")
		go func() { done <- c.WaitFor(context.Background(), func() bool { return false }, closed) }()
		synctest.Wait()
		c.Close()
		if err := <-done; err != closed {
			t.Fatalf("WaitFor after Close: %v, want the closed error", err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var open Changes
		if err := open.WaitFor(ctx, func() bool { return false }, closed); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitFor past its deadline: %v", err)
		}
	})
}

func TestHold_EndsAtTheStallOrWhenTheServerQuits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		start := time.Now()
		Hold(r, 3*time.Second, nil)
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("held %v, want 3s", d)
		}
		quit := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(quit) })
		start = time.Now()
		Hold(r, time.Hour, quit)
		if d := time.Since(start); d != time.Second {
			t.Fatalf("held %v after quit at 1s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start = time.Now()
		Hold(r.WithContext(ctx), time.Hour, nil)
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("held %v after the client gave up at 2s", d)
		}
	})
}

func TestCut_TheClientSeesTheConnectionFail(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Cut(w) }))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got %s, want a failed connection", resp.Status)
	}
}

// injected is a fake's own fault type, as the fakes make theirs.
type injected struct {
	Fault
	scripted bool
}

func TestInjector_ScriptedFaultsComeBeforeChaosWhoseDefaultStatusIsTheFakes(t *testing.T) {
	in := NewInjector[string](http.StatusServiceUnavailable, func(f Fault) injected { return injected{Fault: f} })
	in.Inject(func(r string) bool { return r == "a" }, 1, injected{Fault: Fault{Drop: true}, scripted: true})
	in.SetChaos(Chaos[string]{Seed: 1, RateError: 1})
	f, ok := in.Next("a")
	if !ok || !f.scripted || !f.Drop {
		t.Fatalf("first request got %+v (%v), want the scripted drop", f, ok)
	}
	f, ok = in.Next("a")
	if !ok || f.scripted || f.Status != http.StatusServiceUnavailable {
		t.Fatalf("second request got %+v (%v), want Chaos's error with the injector's status", f, ok)
	}
	if n := in.ChaosCounts().Errors[http.StatusServiceUnavailable]; n != 1 {
		t.Fatalf("ChaosCounts counts %d errors, want 1", n)
	}
	in.SetChaos(Chaos[string]{})
	if f, ok := in.Next("b"); ok {
		t.Fatalf("with Chaos stopped and nothing scripted, a request got %+v", f)
	}
}

// fatalTB records Fatalf instead of ending the test.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestWaiting_WaitsOnTheFakesChangesAndNamesItWhenAwaitFails(t *testing.T) {
	var c Changes
	closed := errors.New("fake closed")
	tb := &fatalTB{TB: t}
	w := NewWaiting(&c, closed, tb, 20*time.Millisecond, "fakeplatform")
	var items atomic.Value
	items.Store([]string{"a"})
	ch := w.Changed()
	items.Store([]string{"a", "b2"})
	c.Notify()
	select {
	case <-ch:
	default:
		t.Fatal("Changed's channel is still open after a change")
	}
	got, err := WaitFirst(t.Context(), w.WaitFor, func() []string { return items.Load().([]string) }, func(s string) bool { return len(s) == 2 })
	if err != nil || got != "b2" {
		t.Fatalf("WaitFirst = %q, %v; want the item that matches", got, err)
	}
	w.Await("nothing", func() bool { return false })
	if want := "fakeplatform: waiting for nothing: context deadline exceeded"; tb.failed != want {
		t.Fatalf("Await failed with %q, want %q", tb.failed, want)
	}
	c.Close()
	if err := w.WaitFor(t.Context(), func() bool { return false }); !errors.Is(err, closed) {
		t.Fatalf("WaitFor after Close = %v, want the fake's closed error", err)
	}
}
