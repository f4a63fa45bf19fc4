package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// version is the broker's version, set when it is built: make build
// stamps it with -ldflags "-X main.version=…" (git describe). Without
// it, the module's version from the build information, else "dev".
var version = "dev"

// build is what the binary's build information says of where it was
// built from.
type build struct {
	Version  string // versionOf
	Revision string // the VCS revision, "" if unknown
	Time     string // the commit's time (RFC 3339), "" if unknown
	Modified bool   // the work tree had changes not committed
	Go       string // the Go version it was built with
}

// buildInfo reads the binary's build information.
func buildInfo() build {
	b := build{Version: versionOf()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Go = info.GoVersion
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionOf is the broker's version: the one stamped at build, else the
// module's (go install …@v1.2.3), else "dev".
func versionOf() string {
	if version != "dev" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return version
}

// String is the version line: "acp-broker v1.2.0 (commit 0123abc…,
// 2026-01-02T03:04:05Z, modified; go1.26.8)".
func (b build) String() string {
	var where []string
	if b.Revision != "" {
		where = append(where, "commit "+b.Revision)
	} else {
		where = append(where, "commit unknown")
	}
	if b.Time != "" {
		where = append(where, b.Time)
	}
	if b.Modified {
		where = append(where, "modified")
	}
	s := fmt.Sprintf("acp-broker %s (%s", b.Version, strings.Join(where, ", "))
	if b.Go != "" {
		s += "; " + b.Go
	}
	return s + ")"
}

// versionCmd is `broker version`.
func versionCmd(_ context.Context, in invocation) int {
	fs := in.flags()
	if code, ok := in.parse(fs); !ok {
		return code
	}
	fmt.Fprintln(in.stdout, buildInfo())
	return 0
}
