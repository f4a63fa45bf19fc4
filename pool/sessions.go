package pool

import "sync"

// SessionBook remembers each thread's agent session so a new process can
// resume it with session/load. Its methods must not block for long.
//
// Its values are plain so that any store can keep them: id is the
// session id ("" when the thread has none), and loadable says the agent
// that created it advertised loadSession, so a new process may resume it.
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
