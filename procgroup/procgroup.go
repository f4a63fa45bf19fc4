// Package procgroup stops a process that leads its own process group:
// SIGTERM to the group, a grace to exit, SIGKILL to the group, and
// SIGKILL again once the leader is reaped, for what it left behind.
package procgroup

import (
	"errors"
	"os/exec"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Signal sends sig to the process group led by pid. A group with no
// process left is no failure; another is logged at debug level.
func Signal(pid int, sig syscall.Signal, log zerolog.Logger) {
	if err := unix.Kill(-pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		log.Debug().Err(err).Str("signal", sig.String()).Msg("signal to process group failed")
	}
}

// Stop ends the group led by pid with the escalation: SIGTERM to the
// group, up to grace for exited to close, then SIGKILL to the group.
// With no grace it sends SIGKILL at once. exited is closed when the
// leader has exited; Stop does not reap it (see Reap), and returns once
// exited is closed or SIGKILL has been sent. It is not abortable: grace
// is its bound. who names the process in the log line that says SIGTERM
// was not enough ("agent", "terminal").
func Stop(pid int, exited <-chan struct{}, grace time.Duration, log zerolog.Logger, who string) {
	if grace <= 0 {
		Signal(pid, syscall.SIGKILL, log)
		return
	}
	Signal(pid, syscall.SIGTERM, log)
	if !Wait(exited, grace) {
		log.Warn().Dur("grace", grace).Msg(who + " ignored SIGTERM; sending SIGKILL to its group")
		Signal(pid, syscall.SIGKILL, log)
	}
}

// Wait reports whether exited closes within d; with d <= 0 it only
// looks.
func Wait(exited <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-exited:
		return true
	case <-t.C:
		return false
	}
}

// Reap waits for cmd, the leader of its own process group, then sends
// SIGKILL to the group, for the descendants it left there, and runs
// after (if not nil): whatever else must end with it. It returns what
// cmd.Wait returned.
func Reap(cmd *exec.Cmd, log zerolog.Logger, after func()) error {
	err := cmd.Wait()
	Signal(cmd.Process.Pid, syscall.SIGKILL, log)
	if after != nil {
		after()
	}
	return err
}
