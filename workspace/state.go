package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinkFile bounds what is read of a worktree's .git file and of its
// record's gitdir and locked files: a path, or a short reason.
const maxLinkFile = 4 << 10

// GitDir returns where repo keeps its history, branches and worktree
// records: repo/.git, or repo itself for a bare repository, with symbolic
// links resolved. It reads the file system only; whether git takes it
// for a repository is for Check to say. A repo whose .git is a file (a
// linked worktree, a submodule) is refused: git would go wherever that
// file says.
func GitDir(repo string) (string, error) {
	abs, err := filepath.Abs(repo)
	if err != nil {
		return "", &wordedError{msg: fmt.Sprintf("%s: %v", repo, err), kind: ErrNotRepository, err: err}
	}
	fi, err := os.Stat(abs)
	if err != nil || !fi.IsDir() {
		why := "does not exist"
		if err == nil {
			why = "is not a directory"
		} else if !errors.Is(err, fs.ErrNotExist) {
			why = "cannot be read: " + unwrapPath(err).Error()
		}
		return "", &wordedError{msg: fmt.Sprintf("%s %s", abs, why), kind: ErrNotRepository, err: err}
	}
	dotGit := filepath.Join(abs, ".git")
	fi, err = os.Stat(dotGit)
	switch {
	case err == nil && fi.IsDir():
		return realPath(dotGit), nil
	case err == nil:
		return "", &wordedError{msg: fmt.Sprintf("%s is not a directory (a linked worktree or a submodule?): give the repository's own directory", dotGit), kind: ErrNotRepository}
	case errors.Is(err, fs.ErrNotExist):
		return realPath(abs), nil
	}
	return "", &wordedError{msg: fmt.Sprintf("%s cannot be read: %v", dotGit, unwrapPath(err)), kind: ErrNotRepository, err: err}
}

// worktreeState is what is at a thread's worktree directory and what the
// repository records of it, read without git: an agent may have changed
// any of it.
type worktreeState struct {
	dir string
	// admins are the names of the repository's worktree records
	// (common/worktrees/NAME) whose gitdir file names dir/.git; the one
	// dir/.git names comes first.
	admins []string
	// present: something is at dir; isDir: a directory, not a link;
	// dotGit: with a .git entry of any kind.
	present, isDir, dotGit bool
	// problem says why dir is not a worktree as the broker made it, and
	// so must not have git run in it; "" if it is one.
	problem string
	// cutShort: it is one, but still locked as git worktree add left it.
	cutShort bool
	// foreign: it is a worktree of another repository (one its agent
	// could not have made up: outside the worktree and the git
	// directory), not to be touched.
	foreign bool
}

// none reports that neither a worktree nor a record of one is there.
func (st *worktreeState) none() bool { return !st.present && len(st.admins) == 0 }

// ours reports whether what is at dir was made as a worktree: the
// repository records it, or it has a .git, or it is no directory at all
// (a link or a file an agent left in its place).
func (st *worktreeState) ours() bool {
	return !st.foreign && (len(st.admins) > 0 || st.dotGit || st.present && !st.isDir)
}

// admin is the git directory of the worktree's record.
func (st *worktreeState) admin(common string) string {
	return filepath.Join(common, "worktrees", st.admins[0])
}

// inspect reads what is at root/name, the worktree directory of a
// thread, and the records of common that point at it. It follows no
// symbolic link an agent could have made, and reads no more than a small
// regular file of each record.
func inspect(ctx context.Context, common, root, name string) (*worktreeState, error) {
	dir := filepath.Join(root, name)
	st := &worktreeState{dir: dir}
	// What git writes in a record's gitdir: the worktree's .git, by its
	// real path (the worktree directory itself was a plain directory).
	backlink := filepath.Join(realPath(root), name, ".git")

	var link string // what dir/.git says, if it is a small regular file
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("worktree %s: %w", dir, err)
	default:
		st.present = true
		st.isDir = fi.Mode().IsDir()
	}
	if st.isDir {
		gfi, err := os.Lstat(filepath.Join(dir, ".git"))
		st.dotGit = err == nil
		if st.dotGit && gfi.Mode().IsRegular() {
			link, _ = readSmallAt(unix.AT_FDCWD, filepath.Join(dir, ".git"))
		}
	}

	hint := ""
	if rest, ok := strings.CutPrefix(link, "gitdir: "+filepath.Join(common, "worktrees")+"/"); ok {
		if h := strings.TrimSuffix(rest, "\n"); h != "" && !strings.ContainsAny(h, "/\n") && h != "." && h != ".." {
			hint = h
		}
	}
	admins, err := records(ctx, common, backlink, hint)
	if err != nil {
		return nil, err
	}
	st.admins = admins

	switch {
	case !st.present && len(admins) == 0:
	case !st.present:
		st.problem = "its directory is gone"
	case !st.isDir && fi.Mode()&fs.ModeSymlink != 0:
		st.problem = "its directory was replaced by a symbolic link"
	case !st.isDir:
		st.problem = "its directory was replaced by a file"
	case !st.dotGit:
		st.problem = "its .git is gone"
	case link == "":
		st.problem = "its .git is not a small file"
	case len(admins) == 0:
		st.problem = "the repository has no record of it"
		st.foreign = foreignWorktree(link, common, dir, backlink)
	case link != "gitdir: "+st.admin(common)+"\n":
		st.problem = "its .git points elsewhere than its record in the repository"
	default:
		if reason, locked := lockReason(common, admins[0]); locked && reason == "initializing" {
			st.problem, st.cutShort = "its making was cut short", true
		}
	}
	return st, nil
}

// foreignWorktree reports whether link, the .git file of dir, names a
// record of another repository that names dir/.git back (backlink): a
// worktree made from another repository (its profile's repo changed),
// outside what an agent of this one can write.
func foreignWorktree(link, common, dir, backlink string) bool {
	record, ok := strings.CutPrefix(strings.TrimSuffix(link, "\n"), "gitdir: ")
	if !ok || !filepath.IsAbs(record) || filepath.Base(filepath.Dir(record)) != "worktrees" {
		return false
	}
	for _, p := range []string{dir, common} {
		if record == p || strings.HasPrefix(record, p+"/") || strings.HasPrefix(realPath(record), realPath(p)+"/") {
			return false
		}
	}
	got, _ := readSmallAt(unix.AT_FDCWD, filepath.Join(record, "gitdir"))
	return got == backlink+"\n"
}

// records returns the names of common's worktree records whose gitdir
// file says backlink, hint (the one the worktree names) first.
func records(ctx context.Context, common, backlink, hint string) ([]string, error) {
	wfd, err := openRecords(common)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worktree records of %s: %w", common, err)
	}
	f := os.NewFile(uintptr(wfd), filepath.Join(common, "worktrees"))
	defer f.Close()
	wfd = int(f.Fd())
	var found []string
	for {
		if err := context.Cause(ctx); err != nil {
			return nil, err
		}
		names, err := f.Readdirnames(256)
		for _, n := range names {
			if gitdirAt(wfd, n) == backlink+"\n" {
				if n == hint {
					found = append([]string{n}, found...)
				} else {
					found = append(found, n)
				}
			}
		}
		if err == io.EOF || len(names) == 0 {
			return found, nil
		}
		if err != nil {
			return nil, fmt.Errorf("worktree records of %s: %w", common, err)
		}
	}
}

// openRecords opens common/worktrees, which must be a directory, not a
// link to one.
func openRecords(common string) (int, error) {
	cfd, err := unix.Open(common, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(cfd)
	return unix.Openat(cfd, "worktrees", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// gitdirAt is the gitdir file of record name in the records directory
// open as wfd, or "".
func gitdirAt(wfd int, name string) string {
	rfd, err := unix.Openat(wfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(rfd)
	s, _ := readSmallAt(rfd, "gitdir")
	return s
}

// lockReason is the reason record name is locked for, if it is.
func lockReason(common, name string) (reason string, locked bool) {
	wfd, err := openRecords(common)
	if err != nil {
		return "", false
	}
	defer unix.Close(wfd)
	rfd, err := unix.Openat(wfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer unix.Close(rfd)
	var st unix.Stat_t
	if unix.Fstatat(rfd, "locked", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return "", false
	}
	reason, _ = readSmallAt(rfd, "locked")
	return strings.TrimSpace(reason), true
}

// readSmallAt reads name in the directory open as dirfd if it is a
// regular file (not a link, a pipe or a device) of at most maxLinkFile
// bytes; it never blocks.
func readSmallAt(dirfd int, name string) (string, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxLinkFile {
		return "", fmt.Errorf("%s is not a small regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxLinkFile+1))
	if err != nil || len(b) > maxLinkFile {
		return "", fmt.Errorf("%s is not a small regular file", name)
	}
	return string(b), nil
}
