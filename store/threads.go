package store

import (
	"encoding/json"
	"slices"
	"time"
)

// Thread is what a thread needs to resume its agent session.
type Thread struct {
	ID        string `json:"id"`
	SessionID string `json:"session,omitempty"`
	// LoadSession: the agent that created the session advertised
	// loadSession, so the session can be resumed in a new process.
	LoadSession bool `json:"load_session,omitempty"`
	// Profile names the agent profile the thread was given at its first
	// prompt, for life.
	Profile string `json:"profile,omitempty"`
	// Options are the agent configuration options chosen in the thread,
	// by option id ("true"/"false" for a boolean), and Mode its legacy
	// mode: applied again whenever its agent starts.
	Options map[string]string `json:"options,omitempty"`
	Mode    string            `json:"mode,omitempty"`
	// Host is the agent host the thread's last agent was started on,
	// where its workspace is ("": this machine).
	Host string `json:"host,omitempty"`
	// Chat is the chat layer's own record of the conversation.
	Chat json.RawMessage `json:"chat,omitempty"`
	// Sessions are the agent sessions the thread has had, the most
	// recently used last (at most MaxThreadSessions).
	Sessions []Session `json:"sessions,omitempty"`
	Updated  time.Time `json:"updated"`
}

// Session is an agent session a thread had: its id, the agent's title
// for it, the profile and directory its agent worked in, and when a turn
// last started in it.
type Session struct {
	ID      string    `json:"id"`
	Title   string    `json:"title,omitempty"`
	Profile string    `json:"profile,omitempty"`
	Dir     string    `json:"dir,omitempty"`
	Used    time.Time `json:"used"`
}

// ThreadSession is a Session with the thread that had it.
type ThreadSession struct {
	Thread string
	Session
}

// MaxThreadSessions bounds the sessions kept of one thread: the most
// recently used.
const MaxThreadSessions = 16

// SessionUsed records that thread's agent of profile, working in dir,
// used session id now.
func (s *Store) SessionUsed(thread, profile, dir, id string) {
	now := s.opts.Now().UTC()
	s.updateThread(thread, func(t *Thread) {
		// A new list: copies of the thread handed out keep theirs.
		rec := Session{ID: id, Profile: profile, Dir: dir, Used: now}
		list := make([]Session, 0, len(t.Sessions)+1)
		for _, x := range t.Sessions {
			if x.ID == id {
				rec.Title = x.Title
				continue
			}
			list = append(list, x)
		}
		list = append(list, rec)
		if n := len(list); n > MaxThreadSessions {
			list = list[n-MaxThreadSessions:]
		}
		t.Sessions = list
	})
}

// SessionTitled records the agent's title for thread's session id.
func (s *Store) SessionTitled(thread, id, title string) {
	s.updateThread(thread, func(t *Thread) {
		if i := slices.IndexFunc(t.Sessions, func(x Session) bool { return x.ID == id }); i >= 0 {
			t.Sessions = slices.Clone(t.Sessions)
			t.Sessions[i].Title = title
		}
	})
}

// SessionsIn are the sessions of every thread kept whose agent of
// profile worked in dir, the most recently used first; dir "" stands for
// the directory of thread's last recorded session.
func (s *Store) SessionsIn(thread, profile, dir string) []ThreadSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dir == "" {
		t := s.threads[thread]
		if t == nil || len(t.Sessions) == 0 {
			return nil
		}
		dir = t.Sessions[len(t.Sessions)-1].Dir
	}
	var out []ThreadSession
	for id, t := range s.threads {
		for _, rec := range slices.Backward(t.Sessions) {
			if rec.Profile == profile && rec.Dir == dir {
				out = append(out, ThreadSession{Thread: id, Session: rec})
			}
		}
	}
	// A thread's own are newest first already, used at the same time or
	// not.
	slices.SortStableFunc(out, func(a, b ThreadSession) int { return b.Used.Compare(a.Used) })
	return out
}

// Thread returns what is kept of a thread.
func (s *Store) Thread(id string) (Thread, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.threads[id]; t != nil {
		return *t, true
	}
	return Thread{}, false
}

// Threads returns every thread kept.
func (s *Store) Threads() []Thread {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Thread, 0, len(s.threads))
	for _, t := range s.threads {
		out = append(out, *t)
	}
	return out
}

// ThreadKept reports whether the store still keeps a thread (it is
// pruned once idle past the retention).
func (s *Store) ThreadKept(thread string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.threads[thread] != nil
}

// ThreadChat returns the chat layer's record of a thread.
func (s *Store) ThreadChat(thread string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.threads[thread]; t != nil && len(t.Chat) > 0 {
		return append(json.RawMessage(nil), t.Chat...), true
	}
	return nil, false
}

// ThreadChats returns the chat layer's records of every thread that has
// one, by thread.
func (s *Store) ThreadChats() map[string]json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]json.RawMessage, len(s.threads))
	for id, t := range s.threads {
		if len(t.Chat) > 0 {
			out[id] = append(json.RawMessage(nil), t.Chat...)
		}
	}
	return out
}

// PutThreadChat stores the chat layer's record of a thread.
func (s *Store) PutThreadChat(id string, chat json.RawMessage) {
	s.updateThread(id, func(t *Thread) { t.Chat = append(json.RawMessage(nil), chat...) })
}

// Session returns the agent session a thread had, "" if none
// (pool.SessionBook).
func (s *Store) Session(thread string) (id string, loadable bool) {
	t, _ := s.Thread(thread)
	return t.SessionID, t.LoadSession
}

// RememberSession records a thread's agent session (pool.SessionBook).
func (s *Store) RememberSession(thread, id string, loadable bool) {
	s.updateThread(thread, func(t *Thread) { t.SessionID, t.LoadSession = id, loadable })
}

// ForgetSession drops a thread's agent session (pool.SessionBook).
func (s *Store) ForgetSession(thread string) {
	s.updateThread(thread, func(t *Thread) { t.SessionID, t.LoadSession = "", false })
}

// ThreadProfile returns the agent profile a thread was given, "" if none
// (adapter.ThreadProfiles).
func (s *Store) ThreadProfile(thread string) string {
	t, _ := s.Thread(thread)
	return t.Profile
}

// ThreadHost is the agent host thread's last agent was started on ("":
// none, or this machine).
func (s *Store) ThreadHost(thread string) string {
	t, _ := s.Thread(thread)
	return t.Host
}

// SetThreadHost records the agent host thread's agent was started on.
func (s *Store) SetThreadHost(thread, host string) {
	s.updateThread(thread, func(t *Thread) { t.Host = host })
}

// SetThreadProfile records the agent profile of a thread
// (adapter.ThreadProfiles).
func (s *Store) SetThreadProfile(thread, profile string) {
	s.updateThread(thread, func(t *Thread) { t.Profile = profile })
}

func (s *Store) updateThread(id string, f func(*Thread)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.threads[id]
	if t == nil {
		t = &Thread{ID: id}
		s.threads[id] = t
	}
	f(t)
	t.Updated = s.opts.Now().UTC()
	s.dirtyThr[id] = true
	s.kickLocked()
}
