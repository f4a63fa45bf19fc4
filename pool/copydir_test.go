package pool

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A thread's directory copied for a fork: files, directories and links
// as they are, links never followed, pipes left out and never opened.
func TestCopyDir_CopiesFilesAndLinksWithoutFollowingThem(t *testing.T) {
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("not for the copy"), 0o600))
	must(t, os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "sub", "deep", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(src, "escape")))
	must(t, os.Symlink("sub/deep/run.sh", filepath.Join(src, "inside")))
	must(t, syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644)) // nobody ever writes it

	n, err := copyDir(t.Context(), src, dst, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len("package main\n")+len("#!/bin/sh\n")) {
		t.Errorf("copied %d bytes, want the two files' only", n)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "sub", "deep", "run.sh")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("sub/deep/run.sh copied as %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "sub", "deep", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh's mode is %v, %v; want 0755", fi.Mode(), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "escape")); err != nil || target != outside {
		t.Errorf("the link out is %q, %v; want it copied as the link it is", target, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "inside")); err != nil || target != "sub/deep/run.sh" {
		t.Errorf("the link inside is %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "pipe")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the named pipe was copied: %v", err)
	}
}

// More than the bound is refused whole, saying how much there is, and
// nothing is left where the copy would have gone; nor is a copy made
// over a directory that holds something.
func TestCopyDir_RefusesMoreThanTheBound(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "big"), make([]byte, 3<<10), 0o644))
	dst := filepath.Join(t.TempDir(), "copy")
	_, err := copyDir(t.Context(), src, dst, 2<<10, nil)
	if !errors.Is(err, ErrWorkspaceTooBig) || !strings.Contains(err.Error(), "3.0 KiB") || !strings.Contains(err.Error(), "2.0 KiB") {
		t.Fatalf("copying 3 KiB within 2 KiB: %v, want ErrWorkspaceTooBig saying both", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused copy left %s: %v", dst, err)
	}
	if _, err := copyDir(t.Context(), src, dst, 4<<10, nil); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	if _, err := copyDir(t.Context(), src, dst, 4<<10, nil); err == nil {
		t.Error("a copy over a directory that holds one succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
