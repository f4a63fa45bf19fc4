package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// BenchmarkGroup_Start measures what a group adds to starting a program
// and reaping it: making the group with its limits, entering it (on v1,
// through the shell prefix), and killing and removing it; beside the
// same program started plainly.
func BenchmarkGroup_Start(b *testing.B) {
	truth, err := exec.LookPath("true")
	if err != nil {
		b.Skip(err)
	}
	b.Run("plain", func(b *testing.B) {
		for range b.N {
			if err := exec.Command(truth).Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in a group", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root")
		}
		m, err := Open(Options{Name: fmt.Sprintf("acp-broker-bench-%d", os.Getpid())})
		if errors.Is(err, ErrUnavailable) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		for range b.N {
			g, err := m.New("bench", Limits{MemoryMax: 256 << 20, PidsMax: 64}, nil)
			if err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(truth)
			done, err := g.Prepare(cmd)
			if err != nil {
				b.Fatal(err)
			}
			err = cmd.Start()
			done()
			if err == nil {
				err = cmd.Wait()
			}
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Remove(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
