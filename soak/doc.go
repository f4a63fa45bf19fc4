// Package soak is a chaos soak of the broker: a real broker process
// against the fake Discord and the fake Slack at once, each with its
// real rate limits, random 429s, 5xx answers and dropped connections,
// many threads whose agents misbehave at random, users who cancel, reset
// and write while the agent works, and SIGKILLs of the broker. It runs only when SOAK_DURATION is set (make
// soak); see BENCHMARKS.md.
package soak
