package pool

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Registry records the agent processes alive, so that a broker that died
// without stopping them can kill them at its next start. Its methods must
// not block for long.
type Registry interface {
	AgentStarted(pid int, startTicks uint64)
	AgentGone(pid int)
}

// Leftover is an agent process an earlier broker started.
type Leftover struct {
	PID        int
	StartTicks uint64
}

// KillLeftovers kills the process group of each leftover agent that still
// runs: the same pid with the same start time (so a reused pid is left
// alone). It returns how many it killed.
func KillLeftovers(list []Leftover, log zerolog.Logger) int {
	killed := 0
	for _, l := range list {
		ticks, err := startTicks(l.PID)
		if err != nil || ticks != l.StartTicks {
			continue
		}
		if err := unix.Kill(-l.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			log.Warn().Err(err).Int("pid", l.PID).Msg("leftover agent not killed")
			continue
		}
		killed++
		log.Warn().Int("pid", l.PID).Str("cause", "left running by a broker that did not stop cleanly").Msg("killed a leftover agent process group")
	}
	return killed
}

// startTicks reads when a process started, in clock ticks since boot
// (field 22 of /proc/<pid>/stat).
func startTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unreadable stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("unreadable stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
