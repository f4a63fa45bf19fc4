// Package cgroup gives each agent a control group of its own, under the
// broker's own, where the kernel holds it to a memory limit and a number
// of processes and weighs its CPU time as one: a runaway agent (a build
// eating memory, a fork bomb) is stopped there, not on the host. It works
// on cgroup v1 (a hierarchy per controller) and v2 (the unified one).
package cgroup

import (
	"acpbroker/internal/safename"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// ErrUnavailable: the broker cannot make control groups for its agents
// here (no cgroup file system, no write access, v2 controllers not
// delegated); the error says which.
var ErrUnavailable = errors.New("agents' resource limits cannot be applied")

// Limits are what the kernel holds one agent's group to.
type Limits struct {
	// MemoryMax is the most memory its processes may use together, in
	// bytes, swap included where the kernel accounts it (0: no limit).
	// Past it the kernel's OOM killer kills one of them.
	MemoryMax int64
	// PidsMax is the most processes and threads it may have at once (0:
	// no limit); fork and clone fail past it.
	PidsMax int64
}

// Options configure a Manager.
type Options struct {
	// Name is the directory made under the broker's own cgroup, in each
	// hierarchy, for its agents' groups. It must be this broker's alone:
	// whatever is in it at Open is an earlier broker's leftover, killed
	// and removed.
	Name   string
	Logger zerolog.Logger
}

// Manager makes the agents' groups. It is safe for concurrent use.
type Manager struct {
	v2   bool
	base []hierarchy // the directory agents' groups are made in, per hierarchy
	log  zerolog.Logger

	mu   sync.Mutex
	seq  uint64
	live int // groups made and not yet removed
}

// Probe says whether the broker could make its agents' groups, and
// where, without changing anything: for check-config.
func Probe() (string, error) {
	l, err := locateSelf()
	if err != nil {
		return "", err
	}
	if err := l.check(); err != nil {
		return "", err
	}
	return l.String(), nil
}

// Open readies the directory agents' groups are made in, under the
// broker's own cgroup, removing (after killing what runs there) any group
// an earlier broker left. On cgroup v2 it enables the controllers for the
// groups, and when its own cgroup must hold no processes for that, it
// first moves the broker into a leaf of it, Name+".broker". The error
// wraps ErrUnavailable when the machine or the broker's rights do not
// allow it.
func Open(opts Options) (*Manager, error) {
	l, err := locateSelf()
	if err != nil {
		return nil, err
	}
	if err := l.check(); err != nil {
		return nil, err
	}
	return open(l, opts, required)
}

// open is Open in l, enabling the v2 controllers need (and cpu, if there).
func open(l layout, opts Options, need []string) (*Manager, error) {
	if opts.Name == "" || strings.ContainsAny(opts.Name, "/\x00") || opts.Name == "." || opts.Name == ".." {
		return nil, fmt.Errorf("cgroup: bad name %q", opts.Name)
	}
	m := &Manager{v2: l.v2, log: opts.Logger}
	if l.v2 {
		own := l.own[0].dir
		ctrls, err := controllers(own, need)
		if err != nil {
			return nil, err
		}
		leaf := filepath.Join(own, opts.Name+".broker")
		err = enable(own, ctrls, leaf)
		if err != nil && len(ctrls) > len(need) {
			ctrls = need // without cpu, which the kernel may refuse (realtime tasks)
			err = enable(own, ctrls, leaf)
		}
		if err != nil {
			return nil, err
		}
		base := filepath.Join(own, opts.Name)
		if err := mkdir(base); err != nil {
			return nil, err
		}
		if err := enable(base, ctrls, ""); err != nil {
			return nil, err
		}
		m.base = []hierarchy{{dir: base}}
	} else {
		for _, h := range l.own {
			base := filepath.Join(h.dir, opts.Name)
			if err := mkdir(base); err != nil {
				return nil, err
			}
			m.base = append(m.base, hierarchy{controller: h.controller, dir: base})
		}
	}
	m.removeLeftovers()
	return m, nil
}

// NameFor is the Name of a broker's agents' directory: one per state
// directory (stateDir), since a broker takes what it finds there for the
// leftovers of an earlier one with the same state.
func NameFor(stateDir string) string {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	sum := sha256.Sum256([]byte(stateDir))
	return "acp-broker-" + hex.EncodeToString(sum[:6])
}

// Sweep removes what brokers of that name left and no broker will start
// again to remove: the groups (killing what runs there) and the
// directories made for them. It enables nothing and moves nothing; for
// test harnesses, whose brokers may be killed.
func Sweep(name string, log zerolog.Logger) error {
	l, err := locateSelf()
	if err != nil {
		return nil // nothing could have been made
	}
	m := &Manager{v2: l.v2, log: log}
	var errs []error
	for _, h := range l.own {
		base := filepath.Join(h.dir, name)
		if _, err := os.Stat(base); err == nil {
			m.base = append(m.base, hierarchy{controller: h.controller, dir: base})
		}
		if l.v2 {
			if err := unix.Rmdir(filepath.Join(h.dir, name+".broker")); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, err)
			}
		}
	}
	m.removeLeftovers()
	for _, h := range m.base {
		if err := unix.Rmdir(h.dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: %w", h.dir, err))
		}
	}
	return errors.Join(errs...)
}

// controllers are need and the optional ones dir has, or an error naming
// what of need it lacks.
func controllers(dir string, need []string) ([]string, error) {
	available, err := readWords(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var out []string
	for _, c := range need {
		if !slices.Contains(available, c) {
			return nil, fmt.Errorf("%w: cgroup v2: the %s controller is not delegated to %s: under systemd, give the unit Delegate=yes", ErrUnavailable, c, dir)
		}
		out = append(out, c)
	}
	for _, c := range optional {
		if slices.Contains(available, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// enable enables ctrls for dir's children. A cgroup with processes may
// not (the root excepted): with leaf set, the broker first moves itself
// there and tries again.
func enable(dir string, ctrls []string, leaf string) error {
	if len(ctrls) == 0 {
		return nil
	}
	enabled, err := readWords(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !slices.ContainsFunc(ctrls, func(c string) bool { return !slices.Contains(enabled, c) }) {
		return nil
	}
	words := make([]string, len(ctrls))
	for i, c := range ctrls {
		words[i] = "+" + c
	}
	control := filepath.Join(dir, "cgroup.subtree_control")
	err = write(control, strings.Join(words, " "))
	if errors.Is(err, unix.EBUSY) && leaf != "" {
		if err := mkdir(leaf); err != nil {
			return err
		}
		if err := write(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
			return fmt.Errorf("%w: moving the broker into %s: %v", ErrUnavailable, leaf, err)
		}
		err = write(control, strings.Join(words, " "))
	}
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("%w: cgroup v2: %s holds other processes than the broker, so no controllers can be enabled for groups under it: run the broker in a cgroup of its own (under systemd, its unit with Delegate=yes)", ErrUnavailable, dir)
	}
	if err != nil {
		return fmt.Errorf("%w: enabling %s for %s: %v", ErrUnavailable, strings.Join(ctrls, ", "), dir, err)
	}
	return nil
}

// leftoverWait bounds the removal of each leftover group at Open.
const leftoverWait = 5 * time.Second

// removeLeftovers kills and removes the groups an earlier broker left.
func (m *Manager) removeLeftovers() {
	names := map[string]bool{}
	for _, h := range m.base {
		entries, err := os.ReadDir(h.dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	for name := range names {
		g := m.group(name)
		killed := len(g.pids())
		ctx, cancel := context.WithTimeout(context.Background(), leftoverWait)
		err := g.remove(ctx)
		cancel()
		if err != nil {
			m.log.Warn().Err(err).Str("cgroup", name).Msg("could not remove a control group an earlier broker left")
			continue
		}
		m.log.Warn().Str("cgroup", name).Int("killed", killed).Str("cause", "left by a broker that did not stop cleanly").Msg("removed a leftover agent control group")
	}
}

// Version is 1 or 2, the cgroup version in use.
func (m *Manager) Version() int {
	if m.v2 {
		return 2
	}
	return 1
}

// Dirs are the directories the agents' groups are made in.
func (m *Manager) Dirs() []string {
	out := make([]string, len(m.base))
	for i, h := range m.base {
		out[i] = h.dir
	}
	return out
}

// Live counts the groups made and not yet removed.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live
}

// New makes a group for an agent, named after it (a number makes it
// unique), with lim. On cgroup v1, where a process enters its group by
// writing its own pid, the group's cgroup.procs and tasks files are given
// to owner (if set), the user the agent runs as. The caller removes it.
func (m *Manager) New(name string, lim Limits, owner *syscall.Credential) (*Group, error) {
	m.mu.Lock()
	m.seq++
	dirName := fmt.Sprintf("%s-%d", safeName(name), m.seq)
	m.live++
	m.mu.Unlock()
	g := m.group(dirName)
	g.limits = lim
	for _, d := range g.dirs {
		if err := os.Mkdir(d.dir, 0o755); err != nil {
			g.discard()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		g.made = append(g.made, d)
	}
	if err := g.apply(lim); err != nil {
		g.discard()
		return nil, err
	}
	if owner != nil && !m.v2 {
		for _, d := range g.dirs {
			for _, f := range []string{"cgroup.procs", "tasks"} {
				if err := os.Chown(filepath.Join(d.dir, f), int(owner.Uid), int(owner.Gid)); err != nil {
					g.discard()
					return nil, fmt.Errorf("cgroup: giving %s to uid %d: %w", f, owner.Uid, err)
				}
			}
		}
	}
	return g, nil
}

// group is the group named name, made or not.
func (m *Manager) group(name string) *Group {
	g := &Group{m: m, name: name}
	for _, h := range m.base {
		g.dirs = append(g.dirs, hierarchy{controller: h.controller, dir: filepath.Join(h.dir, name)})
	}
	g.made = g.dirs
	return g
}

// Close removes the directory the groups were made in, once they are
// all gone.
func (m *Manager) Close() {
	for _, h := range m.base {
		if err := unix.Rmdir(h.dir); err != nil && !errors.Is(err, unix.ENOENT) {
			m.log.Warn().Err(err).Str("dir", h.dir).Msg("could not remove the agents' control group directory")
		}
	}
}

// String says where the groups are made.
func (m *Manager) String() string {
	return layout{v2: m.v2, own: m.base}.String()
}

func (l layout) String() string {
	if l.v2 {
		return "cgroup v2 at " + l.own[0].dir
	}
	parts := make([]string, len(l.own))
	for i, h := range l.own {
		parts[i] = h.controller + " at " + h.dir
	}
	return "cgroup v1: " + strings.Join(parts, ", ")
}

// safeName makes an agent's name a directory name.
func safeName(s string) string { return safename.Of(s, 64, "agent") }

func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return nil
}

// write writes a cgroup file in one write, as the kernel wants it.
func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(value))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
