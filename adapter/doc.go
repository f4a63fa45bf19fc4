// Package adapter runs prompt turns: one at a time per thread, each bound by
// a context that merges the user's cancel, the turn's ceiling, the agent's
// death and shutdown, and each ending in exactly one outcome. It answers
// the agent's permission requests by rule or by a person, and reports
// every decision.
package adapter
