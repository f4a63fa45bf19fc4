package adapter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"acpbroker/acp"
	"acpbroker/internal/clip"
	"acpbroker/pool"
)

// Errors of the sessions a thread may take up or start from.
var (
	// ErrThreadBusy: the thread has a turn running or waiting.
	ErrThreadBusy = errors.New("a turn is running or waiting in this thread; wait for it to end, or cancel it, first")
	// ErrNoSession: the thread has no agent session yet.
	ErrNoSession = errors.New("this thread has no agent session yet; send it a message first")
	// ErrNoSuchSession: the session is none of those the thread may take
	// up (see Sessions).
	ErrNoSuchSession = errors.New("no such session of this thread's agent here")
	// ErrSameSession: the thread is in that session already.
	ErrSameSession = errors.New("this thread is in that session already")
	// ErrNoFork, ErrCannotResume: what the agent does not offer (see
	// package pool).
	ErrNoFork       = pool.ErrNoFork
	ErrCannotResume = pool.ErrCannotResume
	// ErrWorkspaceTooBig: a thread's directory holds more than a fork
	// may copy (agent.fork_max_size).
	ErrWorkspaceTooBig = pool.ErrWorkspaceTooBig
)

// SessionRecords keeps the agent sessions threads have had, for Sessions
// when the agent does not list its own (the state store is one). Its
// methods must not block for long.
type SessionRecords interface {
	// SessionUsed records that thread's agent of profile, working in
	// dir, used session id now: a turn started in it, or it was taken
	// up or forked.
	SessionUsed(thread, profile, dir, id string)
	// SessionTitled records the agent's title for thread's session id.
	SessionTitled(thread, id, title string)
	// SessionsIn are the sessions recorded for profile in dir, the most
	// recently used first; dir "" stands for the directory thread's last
	// recorded session was in.
	SessionsIn(thread, profile, dir string) []SessionRecord
}

// SessionRecord is one session as SessionRecords keeps it.
type SessionRecord struct {
	Thread, ID, Title string
	Used              time.Time
}

// maxListedSessions bounds the sessions Sessions returns.
const maxListedSessions = 50

// SessionInfo is one agent session a thread may take up.
type SessionInfo struct {
	ID, Title string
	// Updated is when it was last used, as the agent or the records say
	// (zero: unknown).
	Updated time.Time
	// Thread is the thread that had it, when the broker's records say.
	Thread string
}

// SessionList is the sessions a thread may take up.
type SessionList struct {
	// FromAgent: the agent listed them (session/list); otherwise they are
	// the broker's records of the threads of this profile and workspace.
	FromAgent bool
	// Current is the thread's session ("": none yet).
	Current  string
	Sessions []SessionInfo
}

// Has reports whether the list holds session id, and returns it.
func (l SessionList) Has(id string) (SessionInfo, bool) {
	i := slices.IndexFunc(l.Sessions, func(s SessionInfo) bool { return s.ID == id })
	if i < 0 {
		return SessionInfo{}, false
	}
	return l.Sessions[i], true
}

// profileOf is thread's agent profile: its live agent's, the one it was
// given, else the default ("" if none is configured).
func (e *Engine) profileOf(thread string) string {
	if a := e.pool.Lookup(thread); a != nil {
		return a.Profile.Name
	}
	name := ""
	if tp := e.config().ThreadProfiles; tp != nil {
		name = tp.ThreadProfile(thread)
	}
	if prof := e.pool.Profile(name); prof != nil {
		return prof.Name
	}
	if prof := e.pool.Profile(""); prof != nil {
		return prof.Name
	}
	return ""
}

// opSink is the Sink of an operation's turn: its error, once.
type opSink chan error

func (opSink) Status(Status)                                      {}
func (opSink) Update(acp.Update)                                  {}
func (opSink) Notice(Notice)                                      {}
func (opSink) Ask(context.Context, *acp.PermissionRequest) Answer { return Answer{} }
func (s opSink) Done(o Outcome)                                   { s <- o.Err }

// control runs f on thread's worker as the thread's next turn, so that
// no prompt runs meanwhile (those that come wait behind it), and returns
// its error. It refuses with ErrThreadBusy when a turn runs or waits in
// the thread. f's ctx ends with ctx, the engine's shutdown, or a Cancel
// or Reset of the thread.
func (e *Engine) control(ctx context.Context, threadID string, f func(ctx context.Context) error) error {
	done := make(opSink, 1)
	t := &turn{e: e, thread: threadID, p: &Prompt{Sink: done}, queued: time.Now(), log: e.log.With().Str("thread", threadID).Logger()}
	t.op = func(wctx context.Context) error {
		octx, cancel := context.WithCancelCause(wctx)
		defer cancel(nil)
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		defer stop()
		return f(octx)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrShutdown
	}
	th := e.threads[threadID]
	// A turn whose outcome is out is done with, even before its worker
	// takes the next.
	if th != nil && ((th.cur != nil && !th.cur.ended.Load()) || len(th.queue) > 0) {
		e.mu.Unlock()
		return ErrThreadBusy
	}
	if th == nil {
		th = &thread{id: threadID}
		e.threads[threadID] = th
		e.startWorkerLocked(th)
	}
	th.queue = append(th.queue, t)
	e.mu.Unlock()
	// f ends soon once ctx does: the wait is bounded by it.
	return <-done
}

// Sessions lists the agent sessions thread may take up: those its agent
// lists (session/list) in the thread's working directory, when it
// offers that, else the broker's records of the sessions of the
// threads of the same profile in the same directory. With no live
// agent, the thread's agent is started to be asked, unless its profile's
// agents are known not to list sessions or a turn runs or waits.
func (e *Engine) Sessions(ctx context.Context, thread string) (SessionList, error) {
	out := SessionList{Current: e.pool.SessionOf(thread)}
	profile := e.profileOf(thread)
	fromAgent := func(a *pool.Agent) bool {
		if !a.Conn.Capabilities().Sessions.CanList() {
			return false
		}
		got, err := e.pool.ListSessions(ctx, a, maxListedSessions)
		if err != nil {
			e.log.Warn().Err(err).Str("thread", thread).Msg("session/list failed; listing the broker's records instead")
			return false
		}
		out.FromAgent = true
		for _, s := range got {
			out.Sessions = append(out.Sessions, SessionInfo{ID: s.SessionID, Title: s.Title, Updated: s.Updated})
		}
		return true
	}
	dir := ""
	if a := e.pool.Lookup(thread); a != nil {
		dir = a.Dir
		if fromAgent(a) {
			return out, nil
		}
	} else if caps, known := e.pool.Capabilities(thread, profile); !known || caps.Sessions.CanList() {
		listed := false
		err := e.control(ctx, thread, func(ctx context.Context) error {
			a, err := e.pool.Acquire(ctx, thread, profile, nil)
			if err != nil {
				return err
			}
			defer e.pool.Release(a, false)
			out.Current, dir = a.SessionID, a.Dir
			listed = fromAgent(a)
			return nil
		})
		switch {
		case err == nil && listed:
			return out, nil
		case err != nil && !errors.Is(err, ErrThreadBusy):
			return out, err
		}
	}
	for _, r := range e.records.SessionsIn(thread, profile, dir) {
		if len(out.Sessions) == maxListedSessions {
			break
		}
		out.Sessions = append(out.Sessions, SessionInfo{ID: r.ID, Title: r.Title, Updated: r.Used, Thread: r.Thread})
	}
	return out, nil
}

// Resumed is a session a thread took up.
type Resumed struct {
	SessionID, Title string
	// Method is how: session/resume or session/load.
	Method string
}

// Resume makes thread continue session id, one of those Sessions lists,
// in its agent (started if need be): with session/resume where the agent
// offers it, else session/load. It refuses with ErrNoSuchSession for a
// session not listed, ErrSameSession for the thread's own, ErrThreadBusy
// while a turn runs or waits, and ErrCannotResume when the agent can do
// neither. The thread's usage is the resumed session's from then on, as
// far as the agent says.
func (e *Engine) Resume(ctx context.Context, thread, id string) (Resumed, error) {
	list, err := e.Sessions(ctx, thread)
	if err != nil {
		return Resumed{}, err
	}
	if id == list.Current {
		return Resumed{}, ErrSameSession
	}
	found, ok := list.Has(id)
	if !ok {
		return Resumed{}, fmt.Errorf("%w: %q", ErrNoSuchSession, clip.Cut(id, 80))
	}
	var res Resumed
	err = e.control(ctx, thread, func(ctx context.Context) error {
		a, err := e.pool.Acquire(ctx, thread, e.profileOf(thread), nil)
		if err != nil {
			return err
		}
		n, err := e.pool.Resume(ctx, a, id)
		if err != nil {
			e.pool.Release(a, false)
			return err
		}
		res = Resumed{SessionID: id, Title: n.Title, Method: n.ResumedWith}
		if res.Title == "" {
			res.Title = found.Title
		}
		usage := n.ContextUsage
		profile, dir := n.Profile.Name, n.Dir
		e.pool.Release(n, false)
		e.mu.Lock()
		delete(e.usage, thread) // the session left's, not this one's
		if usage != nil {
			e.usage[thread] = *usage
		}
		e.mu.Unlock()
		e.records.SessionUsed(thread, profile, dir, id)
		if res.Title != "" {
			e.records.SessionTitled(thread, id, res.Title)
		}
		return nil
	})
	return res, err
}

// CanFork says why thread cannot be forked, or nil: it has no session
// yet, or its agent does not offer session/fork (ErrNoFork; still
// unstable in ACP). When no agent of its profile has said what it
// offers since the broker started, the thread's agent is started to
// tell.
func (e *Engine) CanFork(ctx context.Context, thread string) error {
	if e.pool.SessionOf(thread) == "" {
		return ErrNoSession
	}
	profile := e.profileOf(thread)
	caps, known := e.pool.Capabilities(thread, profile)
	if !known {
		err := e.control(ctx, thread, func(ctx context.Context) error {
			a, err := e.pool.Acquire(ctx, thread, profile, nil)
			if err != nil {
				return err
			}
			caps, known = a.Conn.Capabilities(), true
			e.pool.Release(a, false)
			return nil
		})
		if err != nil && !errors.Is(err, ErrThreadBusy) {
			return err
		}
		if !known {
			caps, known = e.pool.Capabilities(thread, profile)
		}
	}
	if known && !caps.Sessions.CanFork() {
		return ErrNoFork
	}
	return nil
}

// Forked is a thread started from another's session.
type Forked struct {
	// SessionID is the new thread's session, forked from From.
	SessionID, From string
	// Dir is its agent's working directory; Title the session's title,
	// as the agent or the records say.
	Dir, Title string
}

// Fork starts thread child from parent's agent session: child gets
// parent's profile and choices, its own agent working in a directory
// made from parent's (see pool.AcquireFork), and a session forked with
// session/fork (ErrNoFork when the agent does not offer it). child's
// usage is parent's, which its session starts from.
func (e *Engine) Fork(ctx context.Context, parent, child string) (Forked, error) {
	from := e.pool.SessionOf(parent)
	if from == "" {
		return Forked{}, ErrNoSession
	}
	profile := e.profileOf(parent)
	cfg := e.config()
	if tp := cfg.ThreadProfiles; tp != nil {
		tp.SetThreadProfile(child, profile)
	}
	options, mode := e.options.choices.ThreadChoices(parent)
	for id, v := range options {
		e.options.choices.SetThreadOption(child, id, v)
	}
	if mode != "" {
		e.options.choices.SetThreadMode(child, mode)
	}
	title := ""
	for _, r := range e.records.SessionsIn(parent, profile, "") {
		if r.ID == from {
			title = r.Title
		}
	}
	var res Forked
	err := e.control(ctx, child, func(ctx context.Context) error {
		a, err := e.pool.AcquireFork(ctx, child, profile, pool.Fork{Thread: parent, Session: from}, nil)
		if err != nil {
			return err
		}
		res = Forked{SessionID: a.SessionID, From: from, Dir: a.Dir, Title: a.Title}
		usage := a.ContextUsage
		e.pool.Release(a, false)
		if res.Title == "" {
			res.Title = title
		}
		if usage == nil {
			usage = e.usageOf(parent)
		}
		if usage != nil {
			e.setUsage(child, *usage)
		}
		e.records.SessionUsed(child, profile, res.Dir, res.SessionID)
		if res.Title != "" {
			e.records.SessionTitled(child, res.SessionID, res.Title)
		}
		return nil
	})
	return res, err
}

// Bounds of the records kept in memory when the engine has no
// SessionRecords: the last maxOptionViews threads, maxThreadSessions
// sessions each.
const maxThreadSessions = 16

// memoryRecords keeps threads' sessions in memory.
type memoryRecords struct {
	mu      sync.Mutex
	max     int
	threads map[string]*threadRecords
}

type threadRecords struct {
	profile, dir string
	used         time.Time
	sessions     []SessionRecord // the most recently used last
}

func newMemoryRecords(max int) *memoryRecords {
	return &memoryRecords{max: max, threads: map[string]*threadRecords{}}
}

func (m *memoryRecords) SessionUsed(thread, profile, dir, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tr := m.threads[thread]
	if tr == nil {
		if len(m.threads) >= m.max {
			var oldest string
			for t, r := range m.threads {
				if oldest == "" || r.used.Before(m.threads[oldest].used) {
					oldest = t
				}
			}
			delete(m.threads, oldest)
		}
		tr = &threadRecords{}
		m.threads[thread] = tr
	}
	now := time.Now()
	tr.profile, tr.dir, tr.used = profile, dir, now
	rec := SessionRecord{Thread: thread, ID: id, Used: now}
	if i := slices.IndexFunc(tr.sessions, func(r SessionRecord) bool { return r.ID == id }); i >= 0 {
		rec.Title = tr.sessions[i].Title
		tr.sessions = slices.Delete(tr.sessions, i, i+1)
	}
	tr.sessions = append(tr.sessions, rec)
	if len(tr.sessions) > maxThreadSessions {
		tr.sessions = tr.sessions[1:]
	}
}

func (m *memoryRecords) SessionTitled(thread, id, title string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if tr := m.threads[thread]; tr != nil {
		for i := range tr.sessions {
			if tr.sessions[i].ID == id {
				tr.sessions[i].Title = title
			}
		}
	}
}

func (m *memoryRecords) SessionsIn(thread, profile, dir string) []SessionRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dir == "" {
		tr := m.threads[thread]
		if tr == nil {
			return nil
		}
		dir = tr.dir
	}
	var out []SessionRecord
	for _, tr := range m.threads {
		if tr.profile == profile && tr.dir == dir {
			for _, r := range slices.Backward(tr.sessions) {
				out = append(out, r)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b SessionRecord) int { return b.Used.Compare(a.Used) })
	return out
}

// recordsSize is the number of threads whose sessions are kept in
// memory (0 with SessionRecords of the configuration's).
func (e *Engine) recordsSize() int {
	if m, ok := e.records.(*memoryRecords); ok {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.threads)
	}
	return 0
}
