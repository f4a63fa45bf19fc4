package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// removeBatch is how many entries of a directory are read, and removed,
// before it is read again from its start.
const removeBatch = 512

// discard removes what is at st.dir and the repository's records of it,
// without running git and without following any symbolic link: what an
// agent left there, a link, a broken or foreign .git, is removed as it
// is. The directory is first moved aside (to a hidden directory under
// root), so that what cannot be removed is left out of the thread's way
// and out of List's sight; it is then reported (ErrLeftBehind), never
// tried again. A directory that is no worktree of ours is left alone
// (ErrInTheWay) unless it is empty.
func discard(ctx context.Context, common, root, name string, st *worktreeState, repo string) error {
	var left error
	if st.present {
		if !st.ours() {
			return clearWay(st.dir, repo)
		}
		aside, err := os.MkdirTemp(root, ".removing-"+name+"-")
		if err != nil {
			return &wordedError{msg: fmt.Sprintf("worktree %s cannot be moved aside to be removed: %v", st.dir, unwrapPath(err)), kind: ErrLeftBehind, err: err}
		}
		if err := os.Rename(st.dir, filepath.Join(aside, name)); err != nil {
			os.Remove(aside)
			return &wordedError{msg: fmt.Sprintf("worktree %s cannot be moved aside to be removed: %v", st.dir, unwrapPath(err)), kind: ErrLeftBehind, err: err}
		}
		if err := removeTree(ctx, root, filepath.Base(aside), aside); err != nil {
			left = &wordedError{msg: fmt.Sprintf("worktree %s could not be removed (%v); what is left of it is in %s: remove it by hand", st.dir, err, aside), kind: ErrLeftBehind, err: err}
		}
	}
	if len(st.admins) > 0 {
		wfd, err := openRecords(common)
		if err != nil {
			return errors.Join(left, fmt.Errorf("worktree records of %s: %w", common, err))
		}
		defer unix.Close(wfd)
		for _, a := range st.admins {
			if err := removeAt(ctx, wfd, a, filepath.Join(common, "worktrees", a)); err != nil {
				return errors.Join(left, fmt.Errorf("worktree record: %w", err))
			}
		}
	}
	return left
}

// removeTree removes name in the directory dir and everything under it,
// as removeAt does; shown is its path in errors.
func removeTree(ctx context.Context, dir, name, shown string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return removeAt(ctx, fd, name, shown)
}

// removeAt removes name in the directory open as parent and everything
// under it without following symbolic links: a link is removed, never
// what it points to. A directory it may not read or change is made so
// first. It stops when ctx ends. shown is name's path in errors.
func removeAt(ctx context.Context, parent int, name, shown string) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return notThere(err, shown)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return notThere(unix.Unlinkat(parent, name, 0), shown)
	}
	if err := emptyDirAt(ctx, parent, name, shown); err != nil {
		return err
	}
	return notThere(unix.Unlinkat(parent, name, unix.AT_REMOVEDIR), shown)
}

// notThere is err removing shown, nil if it says shown does not exist.
func notThere(err error, shown string) error {
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return &os.PathError{Op: "remove", Path: shown, Err: err}
}

// emptyDirAt removes everything in the directory name of parent. The
// directory is read again from its start after each batch, since
// removing entries may make reading on skip some.
func emptyDirAt(ctx context.Context, parent int, name, shown string) error {
	for {
		fd, err := openDirAt(parent, name)
		if err != nil {
			return &os.PathError{Op: "open", Path: shown, Err: err}
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&0o700 != 0o700 {
			unix.Fchmod(fd, st.Mode&0o7777|0o700) // so that its entries can be removed
		}
		d := os.NewFile(uintptr(fd), name)
		names, rerr := d.Readdirnames(removeBatch)
		var first error
		failed := 0
		for _, n := range names {
			if err := removeAt(ctx, int(d.Fd()), n, shown+"/"+n); err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		d.Close()
		if err := context.Cause(ctx); err != nil {
			return err
		}
		switch {
		case rerr != nil && rerr != io.EOF:
			return &os.PathError{Op: "read", Path: shown, Err: rerr}
		case len(names) < removeBatch || failed == len(names):
			return first
		}
	}
}

// openDirAt opens the directory name of parent, not following a link;
// a directory without read or search permission is given them first.
func openDirAt(parent int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if !errors.Is(err, unix.EACCES) {
		return fd, err
	}
	pfd, perr := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if perr != nil {
		return -1, err
	}
	// chmod through the descriptor's link in /proc changes the directory
	// it was opened on, whatever its name has become.
	cerr := unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), 0o700)
	unix.Close(pfd)
	if cerr != nil {
		return -1, err
	}
	return unix.Openat(parent, name, flags, 0)
}
