// Package pool runs agent processes, one per chat thread: it spawns them in
// their own process group, watches them, bounds how many live at once, and
// stops them with an escalation that leaves no orphans.
package pool
