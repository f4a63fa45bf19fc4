// Package pool runs agent processes, one per chat thread, each started
// from one of several named agent profiles: it spawns them in their own
// process group, watches them, bounds how many live at once (in all and
// per profile), and stops them with an escalation that leaves no orphans.
package pool
