package workspace

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// BenchmarkWorktrees measures what a thread's worktree costs the agent's
// start and the sweep, hardened alone and confined in bubblewrap: making
// it (a new branch from the base, checked out), finding it again at the
// agent's next start, and removing it.
func BenchmarkWorktrees(b *testing.B) {
	for _, m := range gitModes {
		b.Run(m.name, func(b *testing.B) {
			w := &Worktrees{Repo: newRepo(b), Logger: zerolog.Nop()}
			w.Dir = filepath.Join(filepath.Dir(w.Repo), "worktrees")
			m.set(b, w)
			var made, reused, removed time.Duration
			for i := 0; b.Loop(); i++ {
				thread := strconv.Itoa(i)
				start := time.Now()
				if _, _, err := w.Prepare(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				made += time.Since(start)
				start = time.Now()
				if _, _, err := w.Prepare(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				reused += time.Since(start)
				start = time.Now()
				if err := w.Remove(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				removed += time.Since(start)
			}
			n := float64(b.N)
			b.ReportMetric(float64(made.Microseconds())/1000/n, "ms/made")
			b.ReportMetric(float64(reused.Microseconds())/1000/n, "ms/reused")
			b.ReportMetric(float64(removed.Microseconds())/1000/n, "ms/removed")
		})
	}
}
