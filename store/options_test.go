package store

import (
	"fmt"
	"testing"
)

// A thread's chosen options and mode survive a restart and a reset of
// its session; a copy handed out does not change with later choices, and
// the options a thread keeps are bounded.
func TestStore_ThreadChoicesSurviveARestartAndAReset(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{})
	s.SetThreadOption("t1", "model", "large")
	before, _ := s.ThreadChoices("t1")
	s.SetThreadOption("t1", "fast", "true")
	s.SetThreadMode("t1", "code")
	s.RememberSession("t1", "sess-1", true)
	s.ForgetSession("t1")
	if len(before) != 1 {
		t.Fatalf("an earlier copy changed: %v", before)
	}
	s.Close()
	s2 := open(t, dir, Options{})
	opts, mode := s2.ThreadChoices("t1")
	if opts["model"] != "large" || opts["fast"] != "true" || mode != "code" {
		t.Fatalf("t1 choices after a restart = %v, %q", opts, mode)
	}
	if opts, mode := s2.ThreadChoices("t2"); opts != nil || mode != "" {
		t.Fatalf("a thread with no choices has %v, %q", opts, mode)
	}
	for i := range MaxThreadOptions + 5 {
		s2.SetThreadOption("t3", fmt.Sprint("o", i), "v")
	}
	if opts, _ := s2.ThreadChoices("t3"); len(opts) != MaxThreadOptions {
		t.Fatalf("t3 keeps %d options, want %d", len(opts), MaxThreadOptions)
	}
}
