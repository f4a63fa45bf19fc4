package adapter

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Interrupted is a turn that was running when the broker stopped.
type Interrupted struct {
	Thread  string    `json:"thread"`
	Ref     string    `json:"ref"`
	Started time.Time `json:"started"`
}

// StateStore records running turns in a small JSON file, rewritten
// atomically on every change, so that the next start can tell each thread
// that its turn was interrupted. It holds one entry per running turn.
type StateStore struct {
	path string

	mu      sync.Mutex
	running map[string]Interrupted
	err     error
}

// OpenState opens (creating) the store at path and returns the turns the
// previous process left running. The file is then reset: those turns are
// reported once.
func OpenState(path string) (*StateStore, []Interrupted, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, err
	}
	s := &StateStore{path: path, running: map[string]Interrupted{}}
	var left []Interrupted
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, err
	default:
		if err := json.Unmarshal(b, &left); err != nil {
			return nil, nil, errors.New(path + ": unreadable state file: " + err.Error())
		}
	}
	if err := s.save(); err != nil {
		return nil, nil, err
	}
	return s, left, nil
}

// Begin records that thread's turn started.
func (s *StateStore) Begin(thread, ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[thread] = Interrupted{Thread: thread, Ref: ref, Started: time.Now().UTC()}
	s.err = s.saveLocked()
}

// End records that thread's turn ended, whatever the outcome.
func (s *StateStore) End(thread string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, thread)
	s.err = s.saveLocked()
}

// Err returns the last write error, if any.
func (s *StateStore) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Len is the number of turns recorded as running.
func (s *StateStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (s *StateStore) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

func (s *StateStore) saveLocked() error {
	list := make([]Interrupted, 0, len(s.running))
	for _, r := range s.running {
		list = append(list, r)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}
