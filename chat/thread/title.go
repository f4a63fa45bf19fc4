package thread

import (
	"strings"
	"time"
	"unicode"
)

// maxTitle is the most characters of a thread's name.
const maxTitle = 100

// retitling is a thread's rename state while a rename is under way or
// within RetitleInterval of the last one; the entry goes when that time
// has passed with no newer title.
type retitling struct {
	want    string      // the newest title not yet applied ("": none)
	applied string      // the last title applied
	busy    bool        // a rename call is being made
	timer   *time.Timer // the end of the wait after the last rename
}

// retitle names thread after the agent's title for its session, on a
// platform that renames threads: at once if the thread was not renamed
// within RetitleInterval, else when that has passed, with the newest
// title given meanwhile. It never blocks.
func (s *Server) retitle(thread, title string) {
	if s.rename == nil {
		return
	}
	title = titleName(title)
	if title == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.titles[thread]
	if r == nil {
		r = &retitling{}
		s.titles[thread] = r
	}
	if title == r.applied {
		r.want = ""
		return
	}
	r.want = title
	if !r.busy && r.timer == nil {
		s.startRenameLocked(thread, r)
	}
}

// startRenameLocked makes the rename call for r.want on a goroutine the
// Server owns, or forgets the thread when the Server is closing.
func (s *Server) startRenameLocked(thread string, r *retitling) {
	if s.waiting {
		delete(s.titles, thread)
		return
	}
	title := r.want
	r.want, r.busy = "", true
	s.wg.Go(func() { s.renameThread(thread, title) })
}

// renameThread makes one rename call, then waits RetitleInterval (or
// what the platform asks, if more) before the next. A rename the
// platform's limit put off is made after the wait, unless a newer title
// came meanwhile; one that failed otherwise is given up.
func (s *Server) renameThread(thread, title string) {
	err := s.rename.Rename(s.ctx, thread, title)
	wait, limited := retryAfter(err)
	wait = max(wait, s.cfg.RetitleInterval)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.titles[thread]
	if r == nil {
		return
	}
	r.busy = false
	switch {
	case err == nil:
		r.applied = title
		s.log.Info().Str("thread", thread).Str("title", title).Msg("thread renamed after the agent's title")
	case limited && r.want == "":
		r.want = title // tried again after the wait, unless a newer one comes
		s.log.Debug().Err(err).Str("thread", thread).Msg("thread rename waits for the platform's limit")
	case !limited:
		s.log.Warn().Err(err).Str("thread", thread).Str("title", title).Msg("thread not renamed")
	}
	if s.waiting {
		delete(s.titles, thread)
		return
	}
	r.timer = time.AfterFunc(wait, func() { s.renameDue(thread) })
}

// renameDue ends the wait after a rename: the newest title given
// meanwhile is applied, or the thread's entry goes.
func (s *Server) renameDue(thread string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.titles[thread]
	if r == nil {
		return
	}
	r.timer = nil
	if r.want == "" {
		delete(s.titles, thread)
		return
	}
	s.startRenameLocked(thread, r)
}

// stopRetitles drops the waits between renames, at Close.
func (s *Server) stopRetitles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for thread, r := range s.titles {
		if r.timer != nil {
			r.timer.Stop()
			delete(s.titles, thread)
		}
	}
}

// titleName makes an agent's title a thread's name: one line, without
// control characters, at most maxTitle characters; "" if nothing is
// left.
func titleName(title string) string {
	title = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return ' '
		}
		return r
	}, title)
	title = strings.Join(strings.Fields(title), " ")
	if r := []rune(title); len(r) > maxTitle {
		title = strings.TrimSpace(string(r[:maxTitle-1])) + "…"
	}
	return title
}
