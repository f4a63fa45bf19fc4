package pool

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"acpbroker/acp"
)

// SessionBook remembers each thread's agent session so a new process can
// resume it (session/resume or session/load). Its methods must not block
// for long.
//
// Its values are plain so that any store can keep them: id is the
// session id ("" when the thread has none), and loadable says the agent
// that created it advertised session/load or session/resume, so a new
// process may resume it.
type SessionBook interface {
	Session(thread string) (id string, loadable bool)
	RememberSession(thread, id string, loadable bool)
	ForgetSession(thread string)
}

// session is a thread's agent session as MemoryBook keeps it.
type session struct {
	id       string
	loadable bool
}

// MemoryBook is a SessionBook in memory that keeps the last n threads.
type MemoryBook struct {
	mu    sync.Mutex
	n     int
	ids   map[string]session
	order []string // insertion order, oldest first
}

var _ SessionBook = (*MemoryBook)(nil)

// NewMemoryBook returns a book that forgets the oldest thread past n.
func NewMemoryBook(n int) *MemoryBook { return &MemoryBook{n: max(n, 1), ids: map[string]session{}} }

// Session implements SessionBook.
func (b *MemoryBook) Session(thread string) (id string, loadable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.ids[thread]
	return s.id, s.loadable
}

// RememberSession implements SessionBook.
func (b *MemoryBook) RememberSession(thread, id string, loadable bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.ids[thread]; !ok {
		b.order = append(b.order, thread)
	}
	b.ids[thread] = session{id, loadable}
	for len(b.order) > b.n {
		delete(b.ids, b.order[0])
		b.order = b.order[1:]
	}
}

// ForgetSession implements SessionBook.
func (b *MemoryBook) ForgetSession(thread string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.ids[thread]; !ok {
		return
	}
	delete(b.ids, thread)
	for i, t := range b.order {
		if t == thread {
			b.order = append(b.order[:i], b.order[i+1:]...)
			break
		}
	}
}

// Len is the number of threads remembered.
func (b *MemoryBook) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ids)
}

// resumeMethods are the methods an agent takes a session up again with,
// in the order tried: session/resume, cheaper (nothing replayed), where
// it offers it, then session/load.
func resumeMethods(caps acp.AgentCapabilities) []string {
	var out []string
	if caps.Sessions.CanResume() {
		out = append(out, acp.MethodSessionResume)
	}
	if caps.LoadSession {
		out = append(out, acp.MethodSessionLoad)
	}
	return out
}

// takeUp takes session id up on conn with method (session/resume or
// session/load), working in dir.
func takeUp(ctx context.Context, conn *acp.Conn, method, id, dir string, servers []acp.MCPServer) ([]acp.Update, error) {
	if method == acp.MethodSessionResume {
		return conn.ResumeSession(ctx, id, dir, servers)
	}
	return conn.LoadSession(ctx, id, dir, servers)
}

// told is the last title and usage among updates an agent sent while it
// set a session up.
func told(updates []acp.Update) (title string, usage *acp.Usage) {
	for _, u := range updates {
		switch {
		case u.Kind == acp.UpdateSessionInfo && u.Title != nil:
			title = *u.Title
		case u.Kind == acp.UpdateUsage && u.Usage != nil:
			usage = u.Usage
		}
	}
	return title, usage
}

// Capabilities are what thread's agent advertised, or, with none live,
// what the last agent of profile ("": the default) did; ok is false when
// no agent of it has started since the pool was made.
func (p *Pool) Capabilities(thread, profile string) (caps acp.AgentCapabilities, ok bool) {
	if a := p.Lookup(thread); a != nil {
		return a.Conn.Capabilities(), true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prof := p.profiles.lookup(profile); prof != nil {
		profile = prof.Name
	}
	caps, ok = p.caps[profile]
	return caps, ok
}

// SessionOf is thread's agent session: its live agent's, else the one
// the book keeps for it ("": none).
func (p *Pool) SessionOf(thread string) string {
	if a := p.Lookup(thread); a != nil {
		return a.SessionID
	}
	id, _ := p.cfg.Sessions.Session(thread)
	return id
}

// Resume makes a, acquired (busy), take up another of its agent's
// sessions, id, in its working directory: with session/resume where the
// agent offers it, else session/load; ErrCannotResume when it offers
// neither. The session it leaves is closed first where the agent offers
// session/close. It returns the agent as it is now, which the caller
// releases instead of a, and the thread keeps the session from then on.
// On error a is unchanged and still the caller's.
func (p *Pool) Resume(ctx context.Context, a *Agent, id string) (*Agent, error) {
	if id == a.SessionID {
		return a, nil
	}
	caps := a.Conn.Capabilities()
	methods := resumeMethods(caps)
	if len(methods) == 0 {
		return a, ErrCannotResume
	}
	log := p.log.With().Str("thread", a.Thread).Str("session", id).Int("pid", a.Proc.PID()).Logger()
	servers := acp.UsableMCPServers(caps, a.mcpServers(), log)
	var early []acp.Update
	var err error
	method := ""
	for _, method = range methods {
		if early, err = takeUp(ctx, a.Conn, method, id, a.Dir, servers); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return a, err
	}
	if caps.Sessions.CanClose() {
		if cerr := a.Conn.CloseSession(ctx, a.SessionID); cerr != nil {
			log.Warn().Err(cerr).Str("left", a.SessionID).Msg("the session left was not closed")
		}
	}
	n := *a
	n.SessionID, n.Resumed, n.ResumedWith, n.ForkedFrom, n.Lost = id, true, method, "", ""
	n.Title, n.ContextUsage = told(early)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents[a.Thread] != a {
		return a, ErrAgentGone
	}
	p.agents[a.Thread] = &n
	p.cfg.Sessions.RememberSession(a.Thread, id, resumable(caps))
	log.Info().Str("method", method).Str("left", a.SessionID).Msg("agent took up another session")
	return &n, nil
}

// ListSessions lists the sessions a's agent keeps in a's working
// directory (session/list; ErrCannotList when the agent does not offer
// it), at most max; those the agent says are elsewhere are left out.
func (p *Pool) ListSessions(ctx context.Context, a *Agent, max int) ([]acp.SessionInfo, error) {
	if !a.Conn.Capabilities().Sessions.CanList() {
		return nil, ErrCannotList
	}
	list, err := a.Conn.ListSessions(ctx, a.Dir, max)
	if err != nil {
		return nil, err
	}
	here := map[string]bool{filepath.Clean(a.Dir): true}
	if real, err := filepath.EvalSymlinks(a.Dir); err == nil {
		here[real] = true
	}
	out := list[:0]
	for _, s := range list {
		if here[filepath.Clean(s.Cwd)] {
			out = append(out, s)
		}
	}
	return out, nil
}

// DefaultForkMaxBytes bounds the copy of a thread's directory for a
// fork when its Profile sets no ForkMaxBytes.
const DefaultForkMaxBytes = 1 << 30

// forkDir makes the working directory of child, forked from parent: the
// profile's ForkWorkspace's; else its Workspace's; else the shared
// WorkDir; else a copy of parent's directory (copied reports it: the
// caller removes it if the fork fails).
func (p *Pool) forkDir(ctx context.Context, parent, child string, prof *Profile) (dir string, copied bool, err error) {
	switch {
	case prof.ForkWorkspace != nil:
		dir, err = prof.ForkWorkspace(ctx, parent, child)
		if err != nil {
			return "", false, fmt.Errorf("the fork's workspace: %w", err)
		}
		return dir, false, nil
	case prof.Workspace != nil || !prof.PerThreadDir:
		dir, err = p.workDir(ctx, child, prof)
		return dir, false, err
	}
	src := filepath.Join(prof.WorkDir, safeName(p.threadName(parent)))
	dst := filepath.Join(prof.WorkDir, safeName(p.threadName(child)))
	bound := prof.ForkMaxBytes
	if bound <= 0 {
		bound = DefaultForkMaxBytes
	}
	n, err := copyDir(ctx, src, dst, bound, p.cfg.RunAs)
	if err != nil {
		return "", false, fmt.Errorf("the fork's copy of %s: %w", src, err)
	}
	p.log.Info().Str("thread", child).Str("from_thread", parent).Str("dir", dst).Int64("bytes", n).Msg("workspace copied for a fork")
	return dst, true, nil
}
