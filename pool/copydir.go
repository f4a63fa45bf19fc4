package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrWorkspaceTooBig: a thread's directory holds more than a fork may
// copy (Profile.ForkMaxBytes).
var ErrWorkspaceTooBig = errors.New("directory too big to copy")

// maxCopyEntries bounds the files, directories and links copyDir copies,
// whatever their size.
const maxCopyEntries = 1 << 18

// copyDir copies the directory src, which an agent wrote, into dst, which
// must not exist yet or be empty: its directories, regular files and
// symbolic links (as links, never followed), their permissions (without
// set-id bits), given to owner when set. Anything else (a named pipe, a
// socket, a device) is left out, never opened. Nothing is read outside
// src, whatever its links or a concurrent change of it say. When the
// regular files hold more than maxBytes in all, or there are more than
// 2^18 entries, nothing is copied and the error, which wraps
// ErrWorkspaceTooBig,
// says how much there is; a copy that fails half-way is removed. It
// returns how many bytes it copied, and ends early with ctx's cause.
func copyDir(ctx context.Context, src, dst string, maxBytes int64, owner *syscall.Credential) (int64, error) {
	from, err := os.OpenRoot(src)
	if err != nil {
		return 0, err
	}
	defer from.Close()
	size, entries, err := measure(ctx, from.FS())
	if err != nil {
		return 0, err
	}
	if size > maxBytes || entries > maxCopyEntries {
		return 0, fmt.Errorf("%w: %s holds %s in %d entries, more than the %s (and %d entries) a copy may take", ErrWorkspaceTooBig, src, sizeText(size), entries, sizeText(maxBytes), maxCopyEntries)
	}
	if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return 0, err
	}
	if left, err := os.ReadDir(dst); err != nil || len(left) > 0 {
		if err == nil {
			err = fmt.Errorf("%s is not empty", dst)
		}
		return 0, err
	}
	to, err := os.OpenRoot(dst)
	if err != nil {
		return 0, err
	}
	defer to.Close()
	c := copier{ctx: ctx, from: from, to: to, left: maxBytes, owner: owner}
	if err := c.chown("."); err != nil {
		return 0, err
	}
	err = fs.WalkDir(from.FS(), ".", c.entry)
	if err != nil {
		if rerr := os.RemoveAll(dst); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return 0, err
	}
	return maxBytes - c.left, nil
}

// measure is the bytes of the regular files under fsys and its number of
// entries.
func measure(ctx context.Context, fsys fs.FS) (size int64, entries int, err error) {
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		if entries++; entries > maxCopyEntries {
			return fs.SkipAll
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
		}
		return nil
	})
	return size, entries, err
}

type copier struct {
	ctx      context.Context
	from, to *os.Root
	left     int64 // bytes the copy may still write
	owner    *syscall.Credential
}

// entry copies one entry WalkDir found. One gone since it was listed
// (its agent may still be at work) is left out.
func (c *copier) entry(name string, d fs.DirEntry, err error) error {
	if err := c.copyEntry(name, d, err); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (c *copier) copyEntry(name string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if err := c.ctx.Err(); err != nil {
		return context.Cause(c.ctx)
	}
	if name == "." {
		return nil
	}
	info, err := d.Info()
	if err != nil {
		return err
	}
	switch {
	case d.IsDir():
		if err := c.to.Mkdir(name, info.Mode().Perm()|0o700); err != nil {
			return err
		}
	case d.Type()&fs.ModeSymlink != 0:
		target, err := c.from.Readlink(name)
		if err != nil {
			return err
		}
		if err := c.to.Symlink(target, name); err != nil {
			return err
		}
	case d.Type().IsRegular():
		if err := c.file(name, info.Mode().Perm()); err != nil {
			return err
		}
	default:
		return nil // a pipe, a socket, a device: never opened
	}
	return c.chown(name)
}

// file copies one regular file, within what the copy may still write.
func (c *copier) file(name string, perm fs.FileMode) error {
	// Non-blocking: had the file become a named pipe since it was listed,
	// the open would not wait for a writer.
	in, err := c.from.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if info, err := in.Stat(); err != nil || !info.Mode().IsRegular() {
		return err // no longer a regular file: left out
	}
	out, err := c.to.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(in, c.left+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	c.left -= n
	if err == nil && c.left < 0 {
		err = fmt.Errorf("%w: the directory grew past the bound while it was copied", ErrWorkspaceTooBig)
	}
	return err
}

// chown gives name to the copy's owner, if it has one.
func (c *copier) chown(name string) error {
	if c.owner == nil {
		return nil
	}
	return c.to.Lchown(name, int(c.owner.Uid), int(c.owner.Gid))
}

// sizeText says a number of bytes for people.
func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
