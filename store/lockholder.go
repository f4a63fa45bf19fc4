package store

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockedError is ErrLocked for state.dir dir, naming the process that
// holds path's lock when the system tells (Linux's /proc/locks), so
// that whoever meets it knows which process to stop.
func lockedError(dir, path string) error {
	if pid := lockHolder(path); pid > 0 {
		return fmt.Errorf("state.dir %s %w (pid %d holds its lock on %s)", dir, ErrLocked, pid, path)
	}
	return fmt.Errorf("state.dir %s %w", dir, ErrLocked)
}

// maxLockLines bounds the lines of /proc/locks read: a machine's locks
// are a few hundred at most.
const maxLockLines = 1 << 16

// lockHolder is the pid of a process holding a lock on path, or 0 if
// none is found.
func lockHolder(path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; n < maxLockLines && sc.Scan(); n++ {
		// "1: FLOCK  ADVISORY  WRITE 8187 fe:00:9978241 0 EOF"; a
		// blocked waiter's line has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] == "->" {
			continue
		}
		if fields[5] != id {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
