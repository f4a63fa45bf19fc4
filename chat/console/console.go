// Package console is a chat platform on a terminal: one conversation on
// stdin/stdout, with the same turn engine as Discord. Permission questions
// are answered by typing an option's number, the agent's own questions
// field by field.
package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat"
	"acpbroker/internal/clip"
)

// Thread is the id of the console's one conversation.
const Thread = "console"

// Console runs one conversation at a time: each input line is a prompt,
// except a command (a line starting with "/", read as thread.Commands
// and the console's own /help and /quit say), which works even while a
// question is open, and except while a question is open, when the line
// answers it.
type Console struct {
	Engine       chat.Engine
	In           io.Reader
	Out          io.Writer
	ShowThoughts bool
	// Agents lists the agent profiles for /new and /agents (nil: one).
	Agents func() []chat.AgentInfo

	// thread and agent are the conversation /new started ("": Thread,
	// with the default agent); owned by Run's goroutine.
	thread, agent string

	// User names whoever answers permission questions at this terminal,
	// for the audit trail (default: the name of the system user running
	// the broker).
	User string

	mu      sync.Mutex
	asking  chan string // receives the next line while a question is open
	ln      lastLine    // the terminal's last line
	pending sync.WaitGroup
}

// lastLine is what the console knows of the terminal's last line: the
// output is written whole lines at a time, so that an answer, the
// console's own lines and what the user types do not share one. An
// answer's unfinished line is held until its end comes, or a pause of
// partialWait, or maxHeld bytes of it; any other line ends it first.
type lastLine struct {
	owner *sink  // the answer the line continues (nil: none)
	mid   bool   // the line written is not ended
	held  string // the owner's unfinished line, not written yet
	flush *time.Timer
}

// The bounds of an answer's unfinished line held back.
const (
	partialWait = 100 * time.Millisecond
	maxHeld     = 4 << 10
)

var _ chat.Platform = (*Console)(nil)

// Run reads lines until EOF or ctx ends. At EOF it waits (while ctx
// lasts) for the turns already submitted, answering an open permission
// question "cancelled"; when ctx ends it returns at once and Close waits.
func (c *Console) Run(ctx context.Context) error {
	lines := make(chan string)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// A read of stdin cannot be interrupted: this goroutine ends at
		// EOF, or at the next line once Run has returned.
		sc := bufio.NewScanner(c.In)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-stop:
				return
			}
		}
		readErr <- sc.Err()
		close(lines)
	}()
	c.printf("Type a message for the agent; /help lists the commands.\n")
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			c.mu.Lock()
			c.ln.mid, c.ln.owner = false, nil // the user's Enter ended the line
			c.mu.Unlock()
			if !ok {
				c.closeQuestion()
				c.waitTurns(ctx.Done())
				if err := <-readErr; !errors.Is(err, syscall.EIO) {
					return err
				}
				return nil // a terminal that hung up: its input ended
			}
			if c.line(line) {
				c.waitTurns(ctx.Done())
				return nil
			}
		}
	}
}

// waitTurns waits for the submitted turns to end, or for stop.
func (c *Console) waitTurns(stop <-chan struct{}) bool {
	done := make(chan struct{})
	go func() {
		c.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-stop:
		return false
	}
}

var ready = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Ready implements chat.Platform: a terminal is ready at once.
func (c *Console) Ready() <-chan struct{} { return ready }

// Healthy implements chat.Platform.
func (c *Console) Healthy() error { return nil }

// Report implements chat.Platform: it prints each interrupted turn.
func (c *Console) Report(turns []chat.Interruption, reported func(uint64)) {
	for _, it := range turns {
		c.printf("[%s]\n", chat.InterruptionText(it))
		reported(it.ID)
	}
}

// Close implements chat.Platform: it waits up to grace for the last turns
// to print their outcome.
func (c *Console) Close(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	c.waitTurns(ctx.Done())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.breakLocked()
	return nil
}

// answer hands line to an open permission question, if there is one.
func (c *Console) answer(line string) bool {
	c.mu.Lock()
	ch := c.asking
	c.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case ch <- line:
		return true
	default:
		return false
	}
}

func (c *Console) closeQuestion() {
	c.mu.Lock()
	if c.asking != nil {
		close(c.asking)
		c.asking = nil
	}
	c.mu.Unlock()
}

// current is the conversation's thread.
func (c *Console) current() string {
	if c.thread == "" {
		return Thread
	}
	return c.thread
}

// submit sends line to the agent as the thread's next prompt.
func (c *Console) submit(thread, line string) { c.submitPrompt(thread, line, false) }

func (c *Console) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeLocked(fmt.Sprintf(format, args...))
}

// writeLocked writes text on a line of its own: an answer's line is
// ended first.
func (c *Console) writeLocked(text string) {
	if text == "" {
		return
	}
	c.breakLocked()
	io.WriteString(c.Out, text)
	c.ln.mid = !strings.HasSuffix(text, "\n")
}

// breakLocked ends the answer's line, writing what is held of it.
func (c *Console) breakLocked() {
	c.flushLocked()
	if c.ln.mid {
		io.WriteString(c.Out, "\n")
		c.ln.mid = false
	}
	c.ln.owner = nil
}

// flushLocked writes the answer's unfinished line held back.
func (c *Console) flushLocked() {
	if c.ln.flush != nil {
		c.ln.flush.Stop()
		c.ln.flush = nil
	}
	if c.ln.held != "" {
		io.WriteString(c.Out, c.ln.held)
		c.ln.held, c.ln.mid = "", true
	}
}

// stream writes text of s's answer, its whole lines at once; the first
// on a line of its own starts "agent> ".
func (c *Console) stream(s *sink, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln.owner != s {
		c.breakLocked()
		c.ln.owner, c.ln.held = s, "agent> "
	}
	text = c.ln.held + text
	c.ln.held = ""
	if c.ln.flush != nil {
		c.ln.flush.Stop()
		c.ln.flush = nil
	}
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		c.ln.mid = false // text continues the line written, and ends it
		io.WriteString(c.Out, text[:i+1])
		text = text[i+1:]
	}
	if len(text) >= maxHeld {
		io.WriteString(c.Out, text)
		c.ln.mid = true
		return
	}
	if c.ln.held = text; text != "" {
		c.ln.flush = time.AfterFunc(partialWait, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.ln.owner == s {
				c.flushLocked()
			}
		})
	}
}

// sink prints one turn as it streams, within bounds whatever the agent
// sends: the answer's first answerKeep bytes as they come and, past
// them, its last answerKeep when the turn ends, with how much is left
// out between; the first thoughtsKeep bytes of thoughts; the first
// maxTools tool calls and maxNotices notices; each title, plan entry and
// notice cut to maxLineBytes, a plan to its first maxPlan entries.
type sink struct {
	c         *Console
	dir       string // the agent's working directory
	printed   int64  // bytes of the answer printed
	rest      clip.Text
	thoughts  int // bytes of thoughts printed
	notices   int // notices printed
	toolsSeen map[string]*toolSeen
	moreTools int // tool calls past maxTools
}

// toolSeen is what the sink remembers of a tool call it printed.
type toolSeen struct {
	title    string
	terminal string          // its terminal's last line printed
	shown    chat.ContentSum // what it shows
}

// The sink's bounds.
const (
	answerKeep   = 1 << 20
	thoughtsKeep = 64 << 10
	maxTools     = 256
	maxNotices   = 64
	maxPlan      = 64
	maxLineBytes = 1 << 10
	maxDiffBytes = 64 << 10
)

func (s *sink) Status(st adapter.Status) {
	if st.Phase == adapter.PhaseWorking {
		s.dir = st.Dir
	} else {
		s.c.printf("[%s]\n", chat.StatusText(st))
	}
}

func (s *sink) Update(u acp.Update) {
	switch u.Kind {
	case acp.UpdateMessageChunk:
		if u.Content != nil && u.Content.Type == "text" {
			s.answer(u.Content.Text)
		} else if u.Content != nil {
			s.block(u.Content)
		}
	case acp.UpdateThoughtChunk:
		if s.c.ShowThoughts && u.Content != nil && s.thoughts < thoughtsKeep {
			text := clip.Cut(u.Content.Text, thoughtsKeep-s.thoughts)
			s.thoughts += len(u.Content.Text)
			s.c.printf("[thinking] %s\n", text)
			if s.thoughts >= thoughtsKeep {
				s.c.printf("[more thinking, not shown]\n")
			}
		}
	case acp.UpdateToolCall, acp.UpdateToolCallUpdate:
		if s.toolsSeen == nil {
			s.toolsSeen = map[string]*toolSeen{}
		}
		seen := s.toolsSeen[u.ToolCallID]
		if seen == nil {
			if u.Terminal != nil {
				return
			}
			if len(s.toolsSeen) == maxTools {
				if u.Kind == acp.UpdateToolCall {
					if s.moreTools++; s.moreTools == 1 {
						s.breakLine()
						s.c.printf("[more than %d tool calls: the rest are not shown]\n", maxTools)
					}
				}
				return
			}
			seen = &toolSeen{}
			s.toolsSeen[u.ToolCallID] = seen
		}
		if u.Terminal != nil {
			s.terminal(seen, u)
			return
		}
		if u.Title != nil && *u.Title != "" {
			seen.title = clip.Cut(*u.Title, maxLineBytes)
		}
		title := seen.title
		if title == "" {
			title = clip.Cut(u.ToolCallID, maxLineBytes)
		}
		if u.Kind == acp.UpdateToolCall || u.Status != "" {
			s.breakLine()
			s.c.printf("[tool] %s: %s\n", title, chat.ToolStatusWord(u.Status))
		}
		if u.ToolOutput != nil {
			s.toolContent(seen, u.ToolOutput)
		}
	case acp.UpdatePlan:
		s.breakLine()
		for _, e := range u.Entries[:min(len(u.Entries), maxPlan)] {
			mark := " "
			if e.Status == "completed" {
				mark = "x"
			}
			s.c.printf("[plan] [%s] %s\n", mark, clip.Cut(e.Content, maxLineBytes))
		}
		if more := len(u.Entries) - maxPlan; more > 0 {
			s.c.printf("[plan] … and %d more steps\n", more)
		}
	case acp.UpdateSessionInfo:
		if u.Title != nil && *u.Title != "" {
			s.breakLine()
			s.c.printf("[title] %s\n", clip.Cut(*u.Title, maxLineBytes))
		}
	case acp.UpdateConfigOptions, acp.UpdateCurrentMode:
		for _, sw := range u.Switched {
			s.breakLine()
			s.c.printf("[%s]\n", chat.SwitchText(sw))
		}
	}
}

// answer prints the answer's text as it comes, up to answerKeep bytes;
// past them it keeps the end, printed when the turn ends.
func (s *sink) answer(text string) {
	if text == "" {
		return
	}
	if room := answerKeep - s.printed; room > 0 {
		now := clip.Head(text, int(min(room, int64(len(text)))))
		s.c.stream(s, now)
		s.printed += int64(len(now))
		if text = text[len(now):]; text == "" {
			return
		}
		s.printed = answerKeep // a character cut short goes with the rest
	}
	if s.rest.Len() == 0 {
		s.breakLine()
		s.c.printf("[the answer goes on; its end is printed when the turn ends]\n")
		s.rest = clip.New(0, answerKeep)
	}
	s.rest.WriteString(text)
}

// answerEnd prints what was kept of the answer past what was printed.
func (s *sink) answerEnd() {
	if s.rest.Len() == 0 {
		return
	}
	// It keeps no head: what it has is all the rest, or its end.
	whole, omitted, tail := s.rest.Parts()
	s.breakLine()
	if omitted > 0 {
		s.c.printf("[… %s of the answer left out …]\n", chat.Bytes(omitted))
	} else {
		tail = whole
	}
	s.c.stream(s, tail)
	s.rest.Reset()
}

// terminal prints a terminal's last line when it changes: the console is
// a scrolling log, so one line at a time keeps it small.
func (s *sink) terminal(seen *toolSeen, u acp.Update) {
	last := chat.TerminalTail(u.Terminal.Output, 1)
	if u.Terminal.Exit != nil {
		last += " [" + u.Terminal.Exit.String() + "]"
	}
	if last == "" || seen.terminal == last {
		return
	}
	seen.terminal = last
	s.breakLine()
	s.c.printf("[terminal] %s\n", last)
}

// breakLine ends the answer's line, if the terminal's last line is one.
func (s *sink) breakLine() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if s.c.ln.owner == s {
		s.c.breakLocked()
	}
}

func (s *sink) Notice(n adapter.Notice) {
	s.notices++
	switch {
	case s.notices < maxNotices:
		s.c.printf("\n[%s]\n", clip.Cut(chat.NoticeText(n), maxLineBytes))
	case s.notices == maxNotices:
		s.c.printf("\n[more notices: not shown]\n")
	}
}

// Ask prints the options and waits for the next input line; the answer
// is the local user's (Console.User).
func (s *sink) Ask(ctx context.Context, req *acp.PermissionRequest) adapter.Answer {
	ch := make(chan string, 1)
	s.c.mu.Lock()
	if s.c.asking != nil {
		s.c.mu.Unlock()
		return adapter.Answer{} // one question at a time on a terminal
	}
	s.c.asking = ch
	title := req.ToolCall.Title
	if title == "" {
		title = req.ToolCall.ToolCallID
	}
	var q strings.Builder
	fmt.Fprintf(&q, "\n[permission] The agent asks to run: %s\n", title)
	for i, o := range req.Options {
		fmt.Fprintf(&q, "  %d) %s (%s)\n", i+1, o.Name, o.Kind)
	}
	q.WriteString("Answer with a number: ")
	s.c.writeLocked(q.String())
	s.c.mu.Unlock()
	defer func() {
		s.c.mu.Lock()
		if s.c.asking == ch {
			s.c.asking = nil
		}
		s.c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			s.c.printf("\n[permission question closed: %v]\n", context.Cause(ctx))
			return adapter.Answer{}
		case line, ok := <-ch:
			if !ok {
				return adapter.Answer{}
			}
			n, err := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || n < 1 || n > len(req.Options) {
				s.c.printf("Please answer with a number from 1 to %d: ", len(req.Options))
				continue
			}
			o := req.Options[n-1]
			s.c.printf("[chose %s]\n", o.Name)
			return adapter.Answer{Outcome: acp.PermissionOutcome{OptionID: o.OptionID}, By: s.c.user(), ByName: "local user"}
		}
	}
}

func (s *sink) Done(o adapter.Outcome) {
	defer s.c.pending.Done()
	if o.Shown != nil {
		defer o.Shown("") // printed
	}
	s.answerEnd()
	s.breakLine()
	usage := ""
	if u := chat.UsageText(o.Usage, o.TurnUsage); u != "" {
		usage = " · " + u
	}
	if o.Err != nil && o.Elapsed == 0 {
		s.c.printf("[message %s]\n", o.Summary()) // it never reached the agent
		return
	}
	if o.Err != nil {
		s.c.printf("[turn %s after %s%s]\n", o.Summary(), o.Elapsed.Round(time.Millisecond), usage)
		return
	}
	if strings.TrimSpace(o.Text) == "" {
		s.c.printf("[%s%s]\n", o.Summary(), usage)
		return
	}
	s.c.printf("[%s in %s%s]\n", o.Summary(), o.Elapsed.Round(time.Millisecond), usage)
}

// user is who answers at this terminal.
func (c *Console) user() string {
	if c.User != "" {
		return c.User
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

// title names a prompt by its first words.
func title(line string) string {
	line = strings.Join(strings.Fields(line), " ")
	if r := []rune(line); len(r) > 60 {
		line = string(r[:59]) + "…"
	}
	return line
}

// newConversation starts a conversation with agent ("": the default);
// the one before stays as it was, its agent stopped when idle. It
// reports whether it started one.
func (c *Console) newConversation(agent string) bool {
	if c.Agents != nil && agent != "" {
		found := false
		var names []string
		for _, a := range c.Agents() {
			if a.Removed {
				continue
			}
			found = found || a.Name == agent
			names = append(names, a.Name)
		}
		if !found {
			c.printf("[there is no agent %q; the agents are %s]\n", agent, strings.Join(names, ", "))
			return false
		}
	}
	c.thread = fmt.Sprintf("console-%d", time.Now().UnixNano())
	c.agent = agent
	if agent == "" {
		agent = "the default agent"
	}
	c.printf("[new conversation with %s: the next message starts it]\n", agent)
	return true
}

// listAgents prints the agent profiles with their live and busy agents.
func (c *Console) listAgents() {
	if c.Agents == nil {
		c.printf("[one agent is configured]\n")
		return
	}
	for _, a := range c.Agents() {
		def := ""
		if a.Default {
			def = " (default)"
		}
		if a.Removed {
			def = " (removed)"
		}
		desc := ""
		if a.Description != "" {
			desc = ": " + a.Description
		}
		c.printf("[%s%s%s — %d live, %d busy]\n", a.Name, def, desc, a.Live, a.Busy)
	}
}
