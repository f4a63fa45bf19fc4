package pool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"acpbroker/internal/eventually"
	"acpbroker/pool"
)

// profilePool starts a pool of the given profiles, each a fake agent
// unless it names its own command, closed when the test ends.
func profilePool(t *testing.T, max int, def string, profiles map[string]*pool.Profile) *pool.Pool {
	t.Helper()
	for _, prof := range profiles {
		if prof.Command == "" {
			prof.Command = fakeAgent
		}
		if prof.WorkDir == "" && prof.Workspace == nil {
			prof.WorkDir = t.TempDir()
			prof.PerThreadDir = true
		}
	}
	p := pool.New(pool.Config{Profiles: profiles, DefaultProfile: def, MaxSessions: max,
		ExitGrace: 500 * time.Millisecond, Logger: testLogger(t)})
	t.Cleanup(p.Close)
	return p
}

func acquireProfile(t *testing.T, p *pool.Pool, thread, profile string) *pool.Agent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := p.Acquire(ctx, thread, profile, nil)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", thread, profile, err)
	}
	return a
}

// envLine is the agent's value of one environment variable, as it says.
func envLine(t *testing.T, a *pool.Agent, name string) string {
	t.Helper()
	for _, l := range strings.Split(prompt(t, a, "env"), "\n") {
		if v, ok := strings.CutPrefix(l, name+"="); ok {
			return v
		}
	}
	return ""
}

// Each profile's agents run its own program with its own arguments,
// environment, working directory and auth method; "" is the default.
func TestPool_ProfilesStartTheirOwnAgents(t *testing.T) {
	wrapper := filepath.Join(t.TempDir(), "codex-acp")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nexec "+fakeAgent+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	claudeDir, codexDir := t.TempDir(), t.TempDir()
	p := profilePool(t, 4, "claude", map[string]*pool.Profile{
		"claude": {Args: []string{"--load-session", "--auth", "key-a"}, AuthMethod: "key-a",
			Env: []string{"WHO=claude"}, WorkDir: claudeDir},
		"codex": {Command: wrapper, Args: []string{"--no-images", "--auth", "key-b"}, AuthMethod: "key-b",
			Env: []string{"WHO=codex"}, WorkDir: codexDir},
	})
	a := acquireProfile(t, p, "a", "")
	defer p.Release(a, false)
	b := acquireProfile(t, p, "b", "codex")
	defer p.Release(b, false)

	if a.Profile.Name != "claude" || b.Profile.Name != "codex" {
		t.Fatalf("profiles: a %q, b %q; want claude (the default) and codex", a.Profile.Name, b.Profile.Name)
	}
	if got := envLine(t, a, "WHO"); got != "claude" {
		t.Fatalf("a's agent has WHO=%q", got)
	}
	if got := envLine(t, b, "WHO"); got != "codex" {
		t.Fatalf("b's agent has WHO=%q", got)
	}
	ca, cb := a.Conn.Capabilities(), b.Conn.Capabilities()
	if !ca.LoadSession || cb.LoadSession || !ca.PromptCapabilities.Image || cb.PromptCapabilities.Image {
		t.Fatalf("capabilities: a %+v, b %+v; want each profile's own arguments", ca, cb)
	}
	if a.Dir != claudeDir || b.Dir != codexDir {
		t.Fatalf("working directories: a %q, b %q; want %q and %q", a.Dir, b.Dir, claudeDir, codexDir)
	}
}

// A profile's max_sessions holds within the pool's: its third thread
// waits, while another profile still starts at once, and the waiter gets
// the slot its profile frees.
func TestPool_ProfileCapHoldsWhileAnotherProfileStillStarts(t *testing.T) {
	p := profilePool(t, 4, "main", map[string]*pool.Profile{
		"main":     {},
		"reviewer": {MaxSessions: 2},
	})
	r1 := acquireProfile(t, p, "r1", "reviewer")
	r2 := acquireProfile(t, p, "r2", "reviewer")

	got := make(chan *pool.Agent, 1)
	go func() {
		r3, err := p.Acquire(context.Background(), "r3", "reviewer", nil)
		if err != nil {
			t.Error(err)
		}
		got <- r3
	}()
	eventually.Within(t, 10*time.Second, "r3 not waiting", func() bool { return p.Stats().Profiles["reviewer"].Waiting == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m1, err := p.Acquire(ctx, "m1", "main", nil)
	if err != nil {
		t.Fatalf("main's thread held up behind reviewer's waiter: %v", err)
	}
	if s := p.Stats(); s.Profiles["reviewer"].Live != 2 || s.Profiles["reviewer"].Waiting != 1 || s.Profiles["main"].Live != 1 {
		t.Fatalf("profiles = %+v; want reviewer 2 live and 1 waiting, main 1 live", s.Profiles)
	}
	select {
	case <-got:
		t.Fatal("a third reviewer agent started past its max_sessions")
	default:
	}

	p.Release(r1, true)
	var r3 *pool.Agent
	select {
	case r3 = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("r3 never got the slot r1 freed")
	}
	if r3 == nil || r3.Thread != "r3" || r3.Profile.Name != "reviewer" {
		t.Fatalf("r3 got %+v", r3)
	}
	for _, a := range []*pool.Agent{r2, r3, m1} {
		p.Release(a, true)
	}
	waitReleased(t, p)
}

// Making room stops the right idle agent: the least recently used of the
// profile whose own bound holds the caller, even when another profile's
// is older; the least recently used of any profile when the pool's bound
// holds it.
func TestPool_EvictionPicksTheIdleAgentOfTheProfileThatIsFull(t *testing.T) {
	p := profilePool(t, 3, "main", map[string]*pool.Profile{
		"main":     {},
		"reviewer": {MaxSessions: 1},
	})
	idle := func(thread, profile string) {
		t.Helper()
		p.Release(acquireProfile(t, p, thread, profile), false)
		time.Sleep(10 * time.Millisecond) // distinct times of last use
	}
	idle("m1", "main")
	idle("r1", "reviewer")

	r2 := acquireProfile(t, p, "r2", "reviewer") // reviewer is full: r1 goes, not m1
	if p.Lookup("r1") != nil || p.Lookup("m1") == nil || p.Stats().Evicted != 1 {
		t.Fatalf("after r2: r1 live %v, m1 live %v, evictions %d; want r1 stopped, m1 kept",
			p.Lookup("r1") != nil, p.Lookup("m1") != nil, p.Stats().Evicted)
	}
	p.Release(r2, false)
	time.Sleep(10 * time.Millisecond)
	idle("m1", "main") // m1 used again: r2 is now the least recently used
	idle("m2", "main")

	m3 := acquireProfile(t, p, "m3", "main") // the pool is full: r2 goes
	defer p.Release(m3, false)
	if p.Lookup("r2") != nil || p.Lookup("m1") == nil || p.Lookup("m2") == nil || p.Stats().Evicted != 2 {
		t.Fatalf("after m3: r2 live %v, m1 %v, m2 %v; want r2 (least recently used, of another profile) stopped",
			p.Lookup("r2") != nil, p.Lookup("m1") != nil, p.Lookup("m2") != nil)
	}
}

// A waiter held by its profile's bound stops one idle agent of that
// profile, and only one, while callers that come and give up wake it
// again and again during the stop.
func TestPool_ProfileWaiterEvictsOneIdleAgentWhileTheFirstIsStopping(t *testing.T) {
	p := profilePool(t, 4, "main", map[string]*pool.Profile{
		"main":     {},
		"reviewer": {MaxSessions: 2, Args: []string{"--ignore-term", "--no-exit-on-eof"}},
	})
	for _, th := range []string{"r1", "r2"} {
		p.Release(acquireProfile(t, p, th, "reviewer"), false)
		time.Sleep(10 * time.Millisecond)
	}
	got := make(chan *pool.Agent, 1)
	go func() {
		r3, err := p.Acquire(context.Background(), "r3", "reviewer", nil)
		if err != nil {
			t.Error(err)
		}
		got <- r3
	}()
	eventually.Within(t, 10*time.Second, "no eviction for r3", func() bool { return p.Stats().Evicted == 1 })
	for range 3 { // r1 takes two 500ms graces to stop
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := p.Acquire(ctx, "impatient", "reviewer", nil)
		cancel()
		if err == nil {
			t.Fatal("an impatient caller got a slot ahead of r3")
		}
	}
	var r3 *pool.Agent
	select {
	case r3 = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("r3 never got a slot")
	}
	defer p.Release(r3, false)
	if s := p.Stats(); s.Evicted != 1 || p.Lookup("r2") == nil {
		t.Fatalf("evictions = %d, r2 live = %v: want one eviction and r2 kept", s.Evicted, p.Lookup("r2") != nil)
	}
}

// SetProfiles changes what agents are started from, not the agents that
// run: a live agent keeps its profile until it stops; a waiter whose
// profile is removed gives up with ErrUnknownProfile.
func TestPool_SetProfilesChangesNewAgentsOnly(t *testing.T) {
	work := t.TempDir()
	p := profilePool(t, 2, "", map[string]*pool.Profile{"p": {Env: []string{"WHO=one"}, WorkDir: work, PerThreadDir: true}})
	t1 := acquireProfile(t, p, "t1", "")
	if got := envLine(t, t1, "WHO"); got != "one" {
		t.Fatalf("t1's agent has WHO=%q", got)
	}

	p.SetProfiles(map[string]*pool.Profile{"p": {Command: fakeAgent, Env: []string{"WHO=two"}, WorkDir: work, PerThreadDir: true}}, "p")
	if t1.Profile.Env[0] != "WHO=one" {
		t.Fatalf("the live agent's profile changed: %v", t1.Profile.Env)
	}
	p.Release(t1, false)
	if again := acquireProfile(t, p, "t1", ""); again != t1 {
		t.Fatal("t1's live agent was not handed out again")
	}
	t2 := acquireProfile(t, p, "t2", "p")
	if got := envLine(t, t2, "WHO"); got != "two" {
		t.Fatalf("an agent started after SetProfiles has WHO=%q", got)
	}
	p.Release(t1, true) // its next agent is a new one, of the new profile
	t1 = acquireProfile(t, p, "t1", "")
	if got := envLine(t, t1, "WHO"); got != "two" {
		t.Fatalf("t1's new agent has WHO=%q", got)
	}

	// The pool is full of busy agents of p: t3 waits, and learns its
	// profile is gone when it is.
	waited := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), "t3", "p", nil)
		waited <- err
	}()
	eventually.Within(t, 10*time.Second, "t3 not waiting", func() bool { return p.Stats().Waiting == 1 })
	p.SetProfiles(map[string]*pool.Profile{"q": {Command: fakeAgent, WorkDir: work}}, "q")
	select {
	case err := <-waited:
		if !errors.Is(err, pool.ErrUnknownProfile) || !strings.Contains(err.Error(), `"p"`) {
			t.Fatalf("the waiter for a removed profile got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter for a removed profile kept waiting")
	}
	if s := p.Stats(); !s.Profiles["p"].Removed || s.Profiles["p"].Live != 2 || s.Profiles["p"].Busy != 2 || s.DefaultProfile != "q" {
		t.Fatalf("stats after removing p = %+v", s)
	}
	p.Release(t1, true)
	p.Release(t2, true)
	waitReleased(t, p)
	if _, ok := p.Stats().Profiles["p"]; ok {
		t.Fatal("a removed profile with no agents is still listed")
	}
}

// A profile that is not configured is refused only when an agent has to
// be started for it: a thread's live agent is still handed out.
func TestPool_UnknownProfileFailsOnlyWhenAnAgentMustStart(t *testing.T) {
	p := profilePool(t, 2, "main", map[string]*pool.Profile{"main": {}})
	_, err := p.Acquire(context.Background(), "t", "nope", nil)
	if !errors.Is(err, pool.ErrUnknownProfile) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Acquire of an unknown profile = %v", err)
	}
	if s := p.Stats(); s.Spawned != 0 || s.Live != 0 || s.Waiting != 0 {
		t.Fatalf("stats = %+v; want nothing started and nobody waiting", s)
	}
	a := acquireProfile(t, p, "t", "main")
	p.Release(a, false)
	if again := acquireProfile(t, p, "t", "nope"); again != a || again.Profile.Name != "main" {
		t.Fatalf("the thread's live agent was not handed out for another profile")
	}
	p.Release(a, true)
	waitReleased(t, p)
}

// The Workspace hook chooses the working directory before the agent
// starts; when it fails, nothing is started and the error says why.
func TestPool_WorkspaceHookGivesTheAgentItsDirectory(t *testing.T) {
	root := t.TempDir()
	var asked []string
	hook := func(ctx context.Context, thread string) (string, error) {
		asked = append(asked, thread)
		if thread == "broken" {
			return "", errors.New("base commit not found")
		}
		dir := filepath.Join(root, "wt-"+thread)
		return dir, os.MkdirAll(dir, 0o755)
	}
	p := profilePool(t, 2, "", map[string]*pool.Profile{"git": {Workspace: hook}})
	a := acquireProfile(t, p, "t", "")
	if want := filepath.Join(root, "wt-t"); a.Dir != want {
		t.Fatalf("agent runs in %q, want %q", a.Dir, want)
	}
	p.Release(a, true)
	_, err := p.Acquire(context.Background(), "broken", "", nil)
	if err == nil || !strings.Contains(err.Error(), "base commit not found") {
		t.Fatalf("Acquire with a failing workspace = %v", err)
	}
	if s := p.Stats(); s.Spawned != 1 || s.SpawnFailed != 1 {
		t.Fatalf("stats = %+v; want one agent started and one start failed", s)
	}
	if strings.Join(asked, ",") != "t,broken" {
		t.Fatalf("the hook was asked for %v", asked)
	}
	waitReleased(t, p)
}

// waitReleased waits until the pool holds no agent, and checks that every
// per-profile count has come back to zero and that only configured
// profiles are listed.
func waitReleased(t *testing.T, p *pool.Pool) {
	t.Helper()
	eventually.Within(t, 10*time.Second, "agents still held", func() bool {
		s := p.Stats()
		return s.Live == 0 && s.Starting == 0 && s.Stopping == 0 && s.Waiting == 0
	})
	for name, ps := range p.Stats().Profiles {
		if ps.Live != 0 || ps.Busy != 0 || ps.Starting != 0 || ps.Stopping != 0 || ps.Waiting != 0 || ps.Removed {
			t.Fatalf("profile %q after release: %+v", name, ps)
		}
	}
}

// A profile's own sandbox paths are its agents' alone: claude's config
// directory is writable for claude's agent and not there at all for
// codex's, and the other way round.
func TestSandbox_EachProfileSeesOnlyItsOwnPaths(t *testing.T) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	dirs := map[string]string{"claude": t.TempDir(), "codex": t.TempDir()}
	profs := map[string]*pool.Profile{}
	for name, dir := range dirs {
		os.WriteFile(filepath.Join(dir, "credentials"), []byte(name+"-key"), 0o600)
		profs[name] = &pool.Profile{Command: fakeAgent, Env: []string{"PATH=/usr/bin:/bin"}, WorkDir: t.TempDir(), PerThreadDir: true, SandboxRW: []string{dir}}
	}
	p := newPool(t, pool.Config{Profiles: profs, DefaultProfile: "claude", Sandbox: pool.Sandbox{Bwrap: "bwrap"}})
	for name, other := range map[string]string{"claude": "codex", "codex": "claude"} {
		a := acquireProfile(t, p, "t-"+name, name)
		got := prompt(t, a, "probe w:"+filepath.Join(dirs[name], "mine")+" r:"+filepath.Join(dirs[other], "credentials")+" w:"+filepath.Join(dirs[other], "theirs"))
		p.Release(a, false)
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if len(lines) != 3 || !strings.HasSuffix(lines[0], " ok") || strings.HasSuffix(lines[1], " ok") || strings.HasSuffix(lines[2], " ok") {
			t.Fatalf("%s's agent probing its own path and %s's:\n%s", name, other, got)
		}
		if _, err := os.Stat(filepath.Join(dirs[other], "theirs")); err == nil {
			t.Fatalf("%s's agent wrote into %s's directory", name, other)
		}
	}
}
