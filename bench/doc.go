// Package bench holds the broker's end-to-end benchmarks: the broker runs
// as a real process against the fake Discord with fake agent processes.
// See BENCHMARKS.md for the figures and how to reproduce them.
package bench
