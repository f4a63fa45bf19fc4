package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Controllers: agents' groups need memory and pids; cpu, where it is
// there, weighs each group's CPU time as one, and cpuacct (cgroup v1;
// v2 accounts CPU time in every group) counts it.
var (
	required = []string{"memory", "pids"}
	optional = []string{"cpu", "cpuacct"}
)

// layout is where the broker's own control groups are.
type layout struct {
	v2 bool
	// own are the directories of the broker's own cgroups, one per
	// hierarchy used: v1, by controller (memory, pids, and cpu and
	// cpuacct if mounted, once if mounted together), in that order; v2,
	// the one of the unified hierarchy.
	own []hierarchy
	// path is the broker's cgroup v2 as /proc/self/cgroup gives it.
	path string
}

// hierarchy is one cgroup directory: of the controller's v1 hierarchy,
// or ("" controller) of the unified one.
type hierarchy struct {
	controller string
	dir        string
}

// mount is one cgroup file system mounted: root is the cgroup shown at
// point.
type mount struct {
	root, point string
	v2          bool
	controllers []string
}

// locateSelf finds the broker's own cgroups.
func locateSelf() (layout, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return layout{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return layout{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return locate(string(own), string(mounts))
}

// locate finds the broker's own cgroups from /proc/self/cgroup and
// /proc/self/mountinfo: cgroup v1 when memory and pids have hierarchies
// of their own, else the unified hierarchy (v2).
func locate(procCgroup, mountinfo string) (layout, error) {
	v1Paths := map[string]string{}
	v2Path, hasV2 := "", false
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, hasV2 = parts[2], true
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1Paths[c] = parts[2]
		}
	}
	mounts := parseMounts(mountinfo)
	if len(mounts) == 0 {
		return layout{}, fmt.Errorf("%w: no cgroup file system is mounted", ErrUnavailable)
	}
	var l layout
	for _, c := range append(slices.Clone(required), optional...) {
		path, ok := v1Paths[c]
		if !ok {
			continue
		}
		dir, ok := dirOf(mounts, false, c, path)
		if ok && !slices.ContainsFunc(l.own, func(h hierarchy) bool { return h.dir == dir }) {
			l.own = append(l.own, hierarchy{controller: c, dir: dir})
		}
	}
	if len(l.own) >= len(required) && l.own[0].controller == required[0] && l.own[1].controller == required[1] {
		return l, nil
	}
	var missing []string
	for _, c := range required {
		if !slices.ContainsFunc(l.own, func(h hierarchy) bool { return h.controller == c }) {
			missing = append(missing, c)
		}
	}
	if hasV2 {
		if dir, ok := dirOf(mounts, true, "", v2Path); ok {
			return layout{v2: true, own: []hierarchy{{dir: dir}}, path: v2Path}, nil
		}
	}
	if len(l.own) > 0 {
		return layout{}, fmt.Errorf("%w: cgroup v1 has no %s hierarchy mounted where the broker sees it", ErrUnavailable, strings.Join(missing, " or "))
	}
	return layout{}, fmt.Errorf("%w: the broker's own cgroup is not under a cgroup file system it sees", ErrUnavailable)
}

// dirOf is the directory of cgroup path in the first mount of the
// hierarchy (v2, or v1 of controller) that shows it.
func dirOf(mounts []mount, v2 bool, controller, path string) (string, bool) {
	for _, m := range mounts {
		if m.v2 != v2 || (!v2 && !slices.Contains(m.controllers, controller)) {
			continue
		}
		rel := path
		if m.root != "/" {
			var ok bool
			if rel, ok = strings.CutPrefix(path, m.root); !ok || (rel != "" && rel[0] != '/') {
				continue
			}
		}
		return filepath.Join(m.point, rel), true
	}
	return "", false
}

// parseMounts reads the cgroup and cgroup2 mounts of a mountinfo file.
func parseMounts(mountinfo string) []mount {
	var out []mount
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || sep+3 > len(f) {
			continue
		}
		m := mount{root: unescape(f[3]), point: unescape(f[4])}
		switch f[sep+1] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			m.controllers = strings.Split(f[sep+3], ",")
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// check says whether the broker can make its agents' groups in l, without
// changing anything: the directories writable (on v1, a controller it
// can do without, cpu, is left out if not), and on v2 the controllers
// delegated. (That no other process shares its v2 cgroup, which enabling
// the controllers needs, only Open finds out: check-config may well run
// from a shell, in a cgroup the service will not have.)
func (l *layout) check() error {
	var usable []hierarchy
	for _, h := range l.own {
		err := unix.Access(h.dir, unix.W_OK)
		switch {
		case err == nil:
			usable = append(usable, h)
		case slices.Contains(optional, h.controller):
		default:
			return fmt.Errorf("%w: %s is not writable by the broker (uid %d): %v%s", ErrUnavailable, h.dir, os.Geteuid(), err, l.delegateHint())
		}
	}
	l.own = usable
	if !l.v2 {
		return nil
	}
	dir := l.own[0].dir
	available, err := readWords(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var missing []string
	for _, c := range required {
		if !slices.Contains(available, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: cgroup v2: the %s controllers are not delegated to %s%s", ErrUnavailable, strings.Join(missing, " and "), dir, l.delegateHint())
	}
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
		if err := unix.Access(filepath.Join(dir, f), unix.W_OK); err != nil {
			return fmt.Errorf("%w: %s is not writable by the broker (uid %d): %v%s", ErrUnavailable, filepath.Join(dir, f), os.Geteuid(), err, l.delegateHint())
		}
	}
	return nil
}

// delegateHint says how systemd gives a service its cgroup.
func (l layout) delegateHint() string {
	if l.v2 {
		return ": under systemd, give the unit Delegate=yes"
	}
	return ": the broker needs its own cgroup of each hierarchy writable (as root, or given to its user)"
}

// readWords reads a cgroup file of space- or line-separated words.
func readWords(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}
