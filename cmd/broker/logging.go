package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"acpbroker/config"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// levelWriter drops log entries below a level that can change while the
// broker runs (SIGHUP), without a global.
type levelWriter struct {
	w     io.Writer
	level atomic.Int32
}

func (l *levelWriter) Write(p []byte) (int, error) { return l.w.Write(p) }

func (l *levelWriter) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	if level < zerolog.Level(l.level.Load()) {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *levelWriter) set(level string) {
	lv, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		lv = zerolog.InfoLevel
	}
	l.level.Store(int32(lv))
}

var timeFormatOnce sync.Once

// newLogger logs to w as JSON, or for people when format is console (or
// auto and w is a terminal). The returned writer sets the level.
func newLogger(format, level string, w io.Writer) (zerolog.Logger, *levelWriter) {
	timeFormatOnce.Do(func() {
		// Milliseconds: shutdown steps and turn events come closer
		// together than a second. Set once: loggers of an earlier run in
		// the same process (its NATS callbacks) may still be writing.
		zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	})
	if tty := isTerminal(w); format == "console" || (format == "auto" && tty) {
		// Colours only on a terminal: in a file or the journal they are
		// escape codes.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !tty}
	}
	lw := &levelWriter{w: w}
	lw.set(level)
	return zerolog.New(lw).With().Timestamp().Logger(), lw
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// terminalGone reports, for serve, whether the console's terminal has
// hung up: the console is served and stdin was a terminal at the start
// but answers as one no more (a hung-up terminal fails every request).
// A broker without the console, or whose stdin is no terminal, is never
// hung up: SIGHUP reloads it.
func terminalGone(cfg *config.Config, stdin io.Reader) func() bool {
	f, ok := stdin.(*os.File)
	if !ok || !slices.Contains(cfg.Chat.Platforms, config.Console) || !isTerminal(f) {
		return func() bool { return false }
	}
	return func() bool { return !isTerminal(f) }
}

// logFileName is the log in state.dir of a broker whose console shares
// its terminal with stderr; logFileKeep is the size past which a start
// moves it aside (to logFileName.1, replacing the one there), so that
// two files bound it across starts.
const (
	logFileName = "broker.log"
	logFileKeep = 64 << 20
)

// conversationLog opens the file the broker logs to instead of stderr
// when stderr is the console's terminal, so that no log line lands
// inside the conversation; nil when the console is not served or stderr
// is another file (a pipe, the journal, another terminal).
func conversationLog(cfg *config.Config, stdout, stderr io.Writer) (*os.File, error) {
	out, ok1 := stdout.(*os.File)
	errf, ok2 := stderr.(*os.File)
	if !ok1 || !ok2 || !slices.Contains(cfg.Chat.Platforms, config.Console) || !isTerminal(errf) || !sameFile(out, errf) {
		return nil, nil
	}
	if err := os.MkdirAll(cfg.State.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("state.dir: %w", err)
	}
	path := filepath.Join(cfg.State.Dir, logFileName)
	if st, err := os.Stat(path); err == nil && st.Size() > logFileKeep {
		if err := os.Rename(path, path+".1"); err != nil {
			return nil, err
		}
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}

// sameFile reports whether a and b are the same file: the same terminal
// device, or the same file or pipe.
func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	if sa.Mode&unix.S_IFMT == unix.S_IFCHR && sb.Mode&unix.S_IFMT == unix.S_IFCHR {
		return sa.Rdev == sb.Rdev
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}
