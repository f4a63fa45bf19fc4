package pool

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"acpbroker/acp"
)

// An agent on an agent host outlives the broker that started it. The pool
// keeps a note beside each such agent, where it runs (Keeper): what its
// Conn learnt setting it up, and whether a turn runs. A later run of the
// broker, given the agent and its note, takes it up again (Adopt): the
// thread's next turn goes to the same process, in the same session, with
// no start, initialize or session/load.

// Leaver is a Proc whose agent can run on without this broker (see
// Adopt): Leave lets it, its host keeping it a while for the broker's
// next run, and ends the Proc here.
type Leaver interface{ Leave() }

// leaveLocked lets an idle agent that can run on without the broker do
// so as the pool closes, for the broker's next run to take up; it reports
// whether it did. p.mu must be held.
func (p *Pool) leaveLocked(a *Agent) bool {
	l, ok := a.Proc.(Leaver)
	if !ok || exited(a) {
		return false
	}
	if _, ok := a.Proc.(Keeper); !ok {
		return false
	}
	p.keep(a, false)
	l.Leave()
	p.left++
	p.log.Info().Str("thread", a.Thread).Str("agent_host", a.Where).Int("pid", a.Proc.PID()).Msg("agent left running on its host, for the broker's next run")
	return true
}

// Keeper is a Proc that keeps a note beside its agent, where the agent
// runs, for a later run of the broker (see Adopt). Keep must not wait.
type Keeper interface{ Keep(note []byte) }

// kept is the note kept beside an agent.
type kept struct {
	Thread  string `json:"thread"`
	Profile string `json:"profile"`
	// Setup stands for what the profile sets sessions up with (setupOf):
	// a session set up otherwise is not the one the profile makes now.
	Setup   string               `json:"setup"`
	Session string               `json:"session"`
	Init    acp.InitializeResult `json:"init"`
	State   acp.SessionState     `json:"state"`
	// Busy: a turn ran. What the agent does then is the turn's, which
	// ended with the broker that ran it: the agent is not taken up.
	Busy bool `json:"busy"`
	// Started is when the agent was set up.
	Started time.Time `json:"started"`
}

// setupOf stands for what agents of prof are given when their session is
// set up: its MCP servers and its authentication method.
func setupOf(prof *Profile) string {
	b, _ := json.Marshal(struct {
		MCP  []acp.MCPServer
		Auth string
	}{prof.MCPServers, prof.AuthMethod})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// keep has a's Proc keep its note, if it is a Keeper: at every hand-out
// (busy) and every release.
func (p *Pool) keep(a *Agent, busy bool) {
	k, ok := a.Proc.(Keeper)
	if !ok || a.Conn == nil || a.SessionID == "" {
		return
	}
	init, ok := a.Conn.Initialized()
	if !ok {
		return
	}
	state, _ := a.Conn.SessionState(a.SessionID)
	b, err := json.Marshal(kept{Thread: a.Thread, Profile: a.Profile.Name, Setup: setupOf(a.Profile), Session: a.SessionID,
		Init: init, State: state, Busy: busy, Started: a.Started})
	if err != nil {
		p.log.Warn().Err(err).Str("thread", a.Thread).Msg("agent's note not kept")
		return
	}
	k.Keep(b)
}

// ErrNotAdopted: Adopt did not take the agent up; it is the caller's to
// let go.
var ErrNotAdopted = errors.New("agent not taken up")

// adoptFirstID numbers an adopted agent's requests past those of any
// earlier run's Conn: milliseconds since 1970 times a thousand, below
// 2^53 (the ids a JavaScript agent reads exactly) until the year 2255.
func adoptFirstID() uint64 { return uint64(time.Now().UnixMilli()) * 1000 }

// Adopt takes up agent r, which an earlier run of the broker started on
// an agent host and set up, and which still runs there; note is what that
// run kept beside it (see Keeper), and names the thread whose agent it
// was (a warm agent's host knows it by the name it was started under).
// The agent becomes that thread's, idle, in the session it had. It fails
// with ErrNotAdopted (wrapped, saying why), leaving r untouched, when
// nothing was kept, a turn ran (it ended with the broker), the profile is
// gone or sets sessions up otherwise now, the thread has another session
// or an agent, or the pool has no room.
func (p *Pool) Adopt(r Remote, note []byte) (*Agent, error) {
	refuse := func(why string) (*Agent, error) { return nil, fmt.Errorf("%w: %s", ErrNotAdopted, why) }
	if r.Proc == nil || r.Host == nil {
		return refuse("no process or no host for its files")
	}
	if len(note) == 0 {
		return refuse("its broker kept no note beside it (it was never given a session)")
	}
	var k kept
	if err := json.Unmarshal(note, &k); err != nil {
		return refuse("its note cannot be read: " + err.Error())
	}
	thread := k.Thread
	switch {
	case thread == "":
		return refuse("its note names no thread")
	case k.Busy:
		return refuse("a turn ran when its broker stopped")
	case k.Init.ProtocolVersion != acp.ProtocolVersion:
		return refuse(fmt.Sprintf("protocol version %d", k.Init.ProtocolVersion))
	case k.Session == "":
		return refuse("no session")
	}
	if sid, _ := p.cfg.Sessions.Session(thread); sid != k.Session {
		return refuse("the thread has another session now")
	}
	p.mu.Lock()
	prof := p.profiles.byName[k.Profile]
	switch {
	case p.closed:
		p.mu.Unlock()
		return nil, ErrClosed
	case prof == nil:
		p.mu.Unlock()
		return refuse(fmt.Sprintf("profile %q is gone", k.Profile))
	case setupOf(prof) != k.Setup:
		p.mu.Unlock()
		return refuse(fmt.Sprintf("profile %q sets sessions up otherwise now", k.Profile))
	case p.agents[thread] != nil:
		p.mu.Unlock()
		return refuse("the thread has an agent")
	case p.used() >= p.cfg.MaxSessions || p.cappedLocked(prof.Name):
		p.mu.Unlock()
		return refuse("no room in the pool")
	}
	a := &Agent{Thread: thread, Profile: prof, SessionID: k.Session, Host: r.Host, Proc: r.Proc, Dir: r.Dir, Where: r.Where, Adopted: true,
		hostMCP: r.HostMCP, mcp: r.MCPServers}
	p.connect(a, adoptFirstID())
	if !k.Started.IsZero() && k.Started.Before(a.Started) {
		a.Started = k.Started // its uptime goes on
	}
	if err := a.Conn.Adopt(k.Init, k.Session, a.Dir, k.State); err != nil {
		p.mu.Unlock()
		p.shutdown(a, 0)
		return nil, fmt.Errorf("agent not taken up: %w", err)
	}
	a.lastUsed = time.Now()
	p.agents[thread] = a
	p.countLocked(prof.Name, 1, 0, 0)
	p.adopted++
	p.signalLocked()
	p.mu.Unlock()
	p.watchHostLoss(a, r.Shared)
	p.log.Info().Str("thread", thread).Str("profile", prof.Name).Str("session", k.Session).Str("agent_host", r.Where).Int("pid", r.Proc.PID()).
		Msg("agent of an earlier run taken up")
	return a, nil
}
