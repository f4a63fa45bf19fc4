package thread_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"acpbroker/adapter"
	"acpbroker/chat/thread"
	"acpbroker/internal/agenttest"
	"acpbroker/pool"

	"github.com/rs/zerolog"
)

var fakeAgent string

func TestMain(m *testing.M) { agenttest.Main(m, &fakeAgent) }

// board is a chat platform kept in memory, unlike Discord in what it can
// do: threads are a channel message's replies (nothing to open or
// rename), no typing, no forms, no slash commands in threads (a running
// turn carries a Cancel button), and it whispers to one user. hook, if set, is called before each Post,
// Edit, Delete and Mark, and what it returns is the call's error: a
// test delays a call, or fails it, as a platform might.
type board struct {
	hook     func(boardCall) error
	mu       sync.Mutex
	seq      int
	msgs     map[string][]*boardMsg // by where
	whispers []whisper
	opened   map[string]string // thread → its channel
	starters map[string]string // thread → who started it
}

// boardCall is a call the Server makes, as hook sees it.
type boardCall struct {
	op        string // "post", "edit", "delete", "mark"
	where, id string
	view      thread.View
	mark      thread.Mark
	on        bool
}

// called hands c to hook, if there is one.
func (b *board) called(c boardCall) error {
	b.mu.Lock()
	hook := b.hook
	b.mu.Unlock()
	if hook == nil {
		return nil
	}
	return hook(c)
}

type boardMsg struct {
	id, from string
	view     thread.View
	marks    []thread.Mark
}

type whisper struct {
	where, user string
	view        thread.View
}

var _ thread.Whisperer = (*board)(nil)

func newBoard() *board {
	return &board{msgs: map[string][]*boardMsg{}, opened: map[string]string{}, starters: map[string]string{}}
}

func (b *board) add(where, from string, v thread.View) string {
	b.seq++
	id := strconv.Itoa(b.seq)
	b.msgs[where] = append(b.msgs[where], &boardMsg{id: id, from: from, view: v})
	return id
}

func (b *board) find(where, id string) *boardMsg {
	for _, m := range b.msgs[where] {
		if m.id == id {
			return m
		}
	}
	return nil
}

func (b *board) Post(_ context.Context, where string, v thread.View) (string, error) {
	if err := b.called(boardCall{op: "post", where: where, view: v}); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.add(where, "bot", v), nil
}

func (b *board) Edit(_ context.Context, where, id string, v thread.View) error {
	if err := b.called(boardCall{op: "edit", where: where, id: id, view: v}); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.find(where, id)
	if m == nil {
		return thread.ErrNotFound
	}
	v.Files = append(m.view.Files, v.Files...)
	m.view = v
	return nil
}

func (b *board) Delete(_ context.Context, where, id string) error {
	if err := b.called(boardCall{op: "delete", where: where, id: id}); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.msgs[where] = slices.DeleteFunc(b.msgs[where], func(m *boardMsg) bool { return m.id == id })
	return nil
}

func (b *board) Mark(_ context.Context, where, id string, mark thread.Mark, on bool) error {
	if err := b.called(boardCall{op: "mark", where: where, id: id, mark: mark, on: on}); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.find(where, id)
	if m == nil {
		return thread.ErrNotFound
	}
	m.marks = slices.DeleteFunc(m.marks, func(k thread.Mark) bool { return k == mark })
	if on {
		m.marks = append(m.marks, mark)
	}
	return nil
}

func (b *board) Marks(_ context.Context, where, id string) ([]thread.Mark, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.find(where, id); m != nil {
		return slices.Clone(m.marks), nil
	}
	return nil, thread.ErrNotFound
}

// OpenThread: a thread is its first message's replies, named by both.
func (b *board) OpenThread(_ context.Context, channel, id, _ string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := channel + "/" + id
	b.opened[t] = channel
	if m := b.find(channel, id); m != nil {
		b.starters[t] = m.from
	}
	return t, nil
}

func (b *board) Thread(_ context.Context, where string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.opened[where]; ok {
		return ch, nil
	}
	return "", thread.ErrNotFound
}

func (b *board) Starter(_ context.Context, _, t string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.starters[t]; ok {
		return s, nil
	}
	return "", thread.ErrNotFound
}

func (b *board) History(context.Context, string, string) ([]thread.Past, error) { return nil, nil }

func (b *board) Locate(ref string) (where, id, link string, ok bool) {
	where, id, ok = strings.Cut(ref, "#")
	return where, id, "", ok
}

func (b *board) Download(context.Context, thread.Attachment, int64) ([]byte, error) {
	return nil, fmt.Errorf("no files here")
}

// Usage: commands are written to the bot.
func (b *board) Usage(command string, args ...thread.Arg) string {
	s := "@bot " + command
	for _, a := range args {
		s += " " + cmpOr(a.Value, "<"+a.Name+">")
	}
	return s
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (b *board) Whisper(_ context.Context, where, user string, v thread.View) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.whispers = append(b.whispers, whisper{where, user, v})
	return nil
}

// say has user write text in where (a channel, or a thread) and hands it
// to the Server; it returns the message's id.
func (h *boardHarness) say(where string, u thread.User, text string) string {
	b := h.board
	b.mu.Lock()
	id := b.add(where, u.ID, thread.View{Text: text})
	b.mu.Unlock()
	body, addressed := strings.CutPrefix(text, "@bot ")
	h.srv.Message(thread.Message{Where: where, ID: id, Ref: where + "#" + id, From: u, Text: strings.TrimSpace(body),
		Mentioned: addressed, Addressed: addressed, Opens: where + "/" + id})
	return id
}

// messages are the bot's messages in where.
func (b *board) messages(where string) []boardMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []boardMsg
	for _, m := range b.msgs[where] {
		if m.from == "bot" {
			out = append(out, *m)
		}
	}
	return out
}

func (b *board) whispered() []whisper {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.whispers)
}

// boardHarness is a Server of a board, with a real engine, pool and fake
// agent processes.
type boardHarness struct {
	t       *testing.T
	board   *board
	srv     *thread.Server
	engine  *adapter.Engine
	pool    *pool.Pool
	channel string
}

var (
	alice = thread.User{ID: "alice", Name: "Alice"}
	bob   = thread.User{ID: "bob", Name: "Bob"}
)

// newBoardHarness serves a board with cfg (its Limits the board's), the
// fake agent run with args.
func newBoardHarness(t *testing.T, cfg thread.Config, args ...string) *boardHarness {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	h := &boardHarness{t: t, board: newBoard(), channel: "general"}
	h.pool = pool.New(pool.Config{Command: fakeAgent, Args: args, WorkDir: t.TempDir(), PerThreadDir: true, MaxSessions: 4,
		ExitGrace: 500 * time.Millisecond, Logger: log})
	h.engine = adapter.New(h.pool, adapter.Config{CancelGrace: 2 * time.Second, Logger: log})
	cfg.Limits = thread.Limits{Name: "Board", MessageRunes: 3000, Burst: 10, Window: time.Second, Files: 1, FilesBytes: 1 << 20,
		Buttons: 5, Menus: 5, MenuOptions: 100, LinkRunes: 3000}
	if cfg.Access.AllowedChannels == nil {
		cfg.Access.AllowedChannels = []string{h.channel}
	}
	cfg.EditInterval = 50 * time.Millisecond
	cfg.Logger = log
	h.srv = thread.New(cfg, h.board, h.engine)
	h.srv.Accept(true)
	t.Cleanup(func() {
		h.srv.Accept(false)
		h.engine.Close()
		h.srv.Close(5 * time.Second)
		h.pool.Close()
	})
	return h
}

// await waits up to 10s for cond.
func (h *boardHarness) await(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("waiting for %s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start has u open a thread with text and returns it.
func (h *boardHarness) start(u thread.User, text string) string {
	h.t.Helper()
	id := h.say(h.channel, u, "@bot "+text)
	t := h.channel + "/" + id
	h.await("the thread opened", func() bool { _, err := h.board.Thread(context.Background(), t); return err == nil })
	return t
}

// last waits for the bot's last message in where to satisfy cond and
// returns it.
func (h *boardHarness) last(where, what string, cond func(boardMsg) bool) boardMsg {
	h.t.Helper()
	var m boardMsg
	h.await(what, func() bool {
		msgs := h.board.messages(where)
		if len(msgs) == 0 {
			return false
		}
		m = msgs[len(msgs)-1]
		return cond(m)
	})
	return m
}

// reply is a Reply that keeps what was answered.
type reply struct {
	mu   sync.Mutex
	said []string // "private: …", "public: …", "ack", …
}

func (r *reply) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.said = append(r.said, s)
}

func (r *reply) answers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.said)
}

func (r *reply) Private(_ context.Context, v thread.View) { r.add("private: " + v.Text) }
func (r *reply) Public(_ context.Context, text string)    { r.add("public: " + text) }
func (r *reply) Posted(context.Context) (thread.Origin, error) {
	return thread.Origin{}, fmt.Errorf("not posted")
}
func (r *reply) Update(_ context.Context, v thread.View) { r.add("update: " + v.Text) }
func (r *reply) Ack(context.Context)                     { r.add("ack") }
func (r *reply) Defer(context.Context)                   { r.add("defer") }
func (r *reply) Form(_ context.Context, f thread.Form)   { r.add("form: " + f.ID) }

// click has u use action in where and returns the first answer.
func (h *boardHarness) click(where, action string, u thread.User) string {
	h.t.Helper()
	return h.choose(where, action, u, 1)[0]
}

// choose has u use action in where, choosing values, and returns its
// first n answers.
func (h *boardHarness) choose(where, action string, u thread.User, n int, values ...string) []string {
	h.t.Helper()
	r := &reply{}
	h.srv.Click(thread.Click{Where: where, Action: action, Values: values, From: u, Reply: r})
	var got []string
	h.await("the click answered", func() bool { got = r.answers(); return len(got) >= n })
	return got
}
