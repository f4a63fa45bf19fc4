package main

import (
	"io"
	"os"
	"slices"
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

// newLogger logs to w as JSON, or for people when format is console (or
// auto and w is a terminal). The returned writer sets the level.
func newLogger(format, level string, w io.Writer) (zerolog.Logger, *levelWriter) {
	// Milliseconds: shutdown steps and turn events come closer together
	// than a second.
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
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
