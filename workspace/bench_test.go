package workspace

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// BenchmarkShare measures what sharing a thread's branch between hosts
// costs, on a repository of one small file, on this project's own
// history, and on one of 32 MiB that does not compress (2048 files of
// random bytes): a turn's publishing of a new commit, a turn's that
// committed nothing, and a thread's continuing on another host; and all
// three for the first thread shared, when each host's copy of the shared
// repository is empty.
func BenchmarkShare(b *testing.B) {
	for _, size := range []struct {
		name  string
		files int
		ours  bool
	}{{"small", 0, false}, {"this-project", 0, true}, {"32MiB-random", 2048, false}} {
		b.Run(size.name, func(b *testing.B) {
			origin := newRepo(b)
			if size.ours {
				common, err := exec.Command("git", "rev-parse", "--path-format=absolute", "--git-common-dir").Output()
				if err != nil {
					b.Skip("not run in a git checkout")
				}
				origin = filepath.Join(b.TempDir(), "ours.git")
				gitT(b, "", "clone", "-q", "--bare", "--single-branch", strings.TrimSpace(string(common)), origin)
			}
			if size.files > 0 {
				buf := make([]byte, 16<<10)
				for i := range size.files {
					rand.Read(buf)
					if err := os.WriteFile(filepath.Join(origin, "f"+strconv.Itoa(i)), buf, 0o644); err != nil {
						b.Fatal(err)
					}
				}
				gitT(b, origin, "add", ".")
				gitT(b, origin, "commit", "-q", "-m", "big")
			}
			shared := filepath.Join(b.TempDir(), "shared.git")
			gitT(b, "", "clone", "-q", "--bare", origin, shared)
			var h [2]*Worktrees
			for i := range h {
				clone := filepath.Join(b.TempDir(), "repo")
				gitT(b, "", "clone", "-q", shared, clone)
				h[i] = &Worktrees{Repo: clone, Dir: filepath.Join(filepath.Dir(clone), "worktrees"), SharedRepo: shared, Logger: zerolog.Nop()}
			}
			var published, unchanged, continued time.Duration
			// The first thread shared fills each host's copy of the
			// shared repository: it is timed apart, as "cold".
			for i := -1; i < 0 || b.Loop(); i++ {
				if i == 0 {
					b.ReportMetric(float64((published+unchanged+continued).Microseconds())/1000, "ms/cold")
					published, unchanged, continued = 0, 0, 0
				}
				thread := strconv.Itoa(i)
				dir, _, err := h[0].Prepare(b.Context(), thread)
				if err != nil {
					b.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "turn"), []byte(thread), 0o644); err != nil {
					b.Fatal(err)
				}
				gitT(b, dir, "add", "turn")
				gitT(b, dir, "commit", "-q", "-m", "turn")
				start := time.Now()
				if err := h[0].Publish(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				published += time.Since(start)
				start = time.Now()
				if err := h[0].Publish(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				unchanged += time.Since(start)
				start = time.Now()
				if _, _, err := h[1].Prepare(b.Context(), thread); err != nil {
					b.Fatal(err)
				}
				continued += time.Since(start)
			}
			n := float64(b.N)
			b.ReportMetric(float64(published.Microseconds())/1000/n, "ms/published")
			b.ReportMetric(float64(unchanged.Microseconds())/1000/n, "ms/unchanged")
			b.ReportMetric(float64(continued.Microseconds())/1000/n, "ms/continued")
		})
	}
}
