package broker

import (
	"fmt"
	"strings"

	"acpbroker/config"
)

// ThreadID is the id a platform's thread has in the engine, the pool, the
// state store and the audit trail: the platform's name, a colon, and the
// id the platform gave it ("discord:1234567890"). Each platform sees its
// own ids alone.
func ThreadID(platform, thread string) string { return platform + ":" + thread }

// SplitThreadID splits a ThreadID into the platform's name and its own
// id; ok is false for an id that names no platform.
func SplitThreadID(id string) (platform, thread string, ok bool) {
	return strings.Cut(id, ":")
}

// legacyThread is the ThreadID of a thread an earlier broker recorded by
// its platform's id alone, when a broker served one platform: the
// console's ("console", "console-…") or else Discord's. An id that names
// its platform is kept. The store renames the ids of an earlier broker's
// state file with it, once.
func legacyThread(id string) string {
	if _, _, ok := SplitThreadID(id); ok {
		return id
	}
	if id == "console" || strings.HasPrefix(id, "console-") {
		return ThreadID(config.Console, id)
	}
	return ThreadID("discord", id)
}

// threadName names a thread where its id would be a name: its directory
// (with per_thread_dir), a launcher's {thread}, its agent's control
// group. A Discord thread is named by its own id, as before thread ids
// named their platform, so that its directory stays where it was;
// another by its platform's name, a dash, and its own id with each byte
// but a letter, a digit or '-' written _XX: names that a container's
// name may be, and that no two threads share.
func threadName(id string) string {
	platform, thread, ok := SplitThreadID(id)
	if !ok {
		return id
	}
	if platform == "discord" {
		return thread
	}
	var b strings.Builder
	b.WriteString(platform + "-")
	for i := 0; i < len(thread); i++ {
		c := thread[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02X", c)
	}
	return b.String()
}

// worktreeThread is the name a thread's worktree and branch are made
// from (escaped by the workspace): a Discord thread's own id, as before
// thread ids named their platform, so that its worktree is found where
// it was; another's ThreadID. legacyThread gives the ThreadID back.
func worktreeThread(id string) string {
	if platform, thread, ok := SplitThreadID(id); ok && platform == "discord" {
		return thread
	}
	return id
}
