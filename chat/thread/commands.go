package thread

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"acpbroker/adapter"
	"acpbroker/chat"
)

// CommandSpec describes a command people give the bot, for a platform to
// offer it (Discord registers it as a slash command) and for the Server
// to read it when it is written to the bot in a thread.
type CommandSpec struct {
	Name, Description string
	// Params are its parameters, in the order a written command gives
	// them.
	Params []Param
}

// Param is a parameter of a command.
type Param struct {
	Name, Description string
	// Suggest: the values are suggested as the user types (Suggest).
	Suggest bool
	// Agent: its value is one of the agent profiles (Server.Agents).
	Agent bool
	// Rest: written, it takes the rest of the line (else one word).
	Rest bool
}

// Commands are every command, in the order a platform lists them. new,
// agents and schedules are given anywhere the bot serves; the others
// inside one of its threads.
var Commands = []CommandSpec{
	{Name: "cancel", Description: "Stop the agent's current turn in this thread"},
	{Name: "reset", Description: "End this thread's agent session; the next message starts a fresh one"},
	{Name: "status", Description: "Show this thread's agent: profile, model, mode, session, busy or idle, queue, uptime"},
	{Name: "new", Description: "Start a new thread with an agent", Params: []Param{
		{Name: "agent", Description: "The agent to start (default: this channel's, or the bot's default)", Agent: true},
		{Name: "prompt", Description: "The first message for the agent (or send it in the thread)", Rest: true},
	}},
	{Name: "agents", Description: "List the agents this bot runs, with how many are live and busy"},
	{Name: "model", Description: "Show or choose the model of this thread's agent", Params: []Param{
		{Name: "value", Description: "The model to use (suggested as you type)", Suggest: true},
	}},
	{Name: "mode", Description: "Show or choose the mode of this thread's agent", Params: []Param{
		{Name: "value", Description: "The mode to use (suggested as you type)", Suggest: true},
	}},
	{Name: "config", Description: "Show or set one of the options of this thread's agent", Params: []Param{
		{Name: "option", Description: "The option (suggested as you type)", Suggest: true},
		{Name: "value", Description: "Its new value (suggested as you type)", Suggest: true},
	}},
	{Name: "agent", Description: "List the commands of this thread's agent, or run one", Params: []Param{
		{Name: "name", Description: "The command to run (suggested as you type)", Suggest: true},
		{Name: "input", Description: "What to give the command", Rest: true},
	}},
	{Name: "schedules", Description: "List the schedules: next run, last outcome; an approver runs one now, pauses or resumes it", Params: []Param{
		{Name: "action", Description: "run, pause or resume (nothing: list them)"},
		{Name: "name", Description: "The schedule"},
	}},
	{Name: "steer", Description: "Stop the agent's current turn and send it this instead, in the same session", Params: []Param{
		{Name: "message", Description: "What the agent should do now", Rest: true},
	}},
	{Name: "queue", Description: "List the messages waiting in this thread, or remove one", Params: []Param{
		{Name: "remove", Description: "The number of a waiting message to remove (its author or an approver may)", Rest: true},
	}},
	{Name: "sessions", Description: "List the agent's earlier sessions here, which this thread can resume"},
	{Name: "resume", Description: "Continue one of the agent's earlier sessions in this thread", Params: []Param{
		{Name: "session", Description: "The session's id, as /sessions lists it"},
	}},
	{Name: "fork", Description: "Open a new thread that starts from this conversation, with its own agent and workspace"},
	{Name: "web", Description: "Get a private link that signs you in to the broker's web pages (in a thread: to its page)"},
}

// Click takes the use of one of the Server's buttons or menus: the
// first allowed answer to a permission request or a question decides; a
// running turn's Cancel button cancels it; a menu of an option's choices
// changes it.
// It does not block; an action that is none of the Server's is left
// unanswered.
func (s *Server) Click(c Click) {
	s.event(c.Reply, func() {
		switch {
		case strings.HasPrefix(c.Action, "perm:"):
			s.onPermissionClick(c)
		case strings.HasPrefix(c.Action, "elic:"):
			s.onQuestionClick(c)
		case strings.HasPrefix(c.Action, "stop:"):
			s.onStopClick(c)
		case strings.HasPrefix(c.Action, "opt:"):
			s.onOptionClick(c)
		case strings.HasPrefix(c.Action, sendNowPrefix):
			s.onSendNowClick(c)
		case strings.HasPrefix(c.Action, removePrefix):
			s.onRemoveClick(c)
		}
	})
}

// Command takes a command given as a slash command (or the like). It
// does not block.
func (s *Server) Command(c Command) {
	s.event(c.Reply, func() { s.command(c) })
}

// tell answers r with text, to its user alone.
func (s *Server) tell(r Reply, text string) { r.Private(s.ctx, View{Text: text}) }

// event runs f on a goroutine of the Server's, or tells the user the
// broker is not taking events now; once Close waits, nothing is
// answered.
func (s *Server) event(r Reply, f func()) {
	s.mu.Lock()
	accepting := s.accepting
	s.mu.Unlock()
	s.spawnLate(func() {
		if !accepting {
			s.tell(r, "The broker is shutting down; try again in a moment.")
			return
		}
		f()
	})
}

// command serves a command: who may give it is checked against the
// lists in force.
func (s *Server) command(c Command) {
	if !s.acl().user(c.From) {
		s.tell(c.Reply, "You are not allowed to use this bot.")
		return
	}
	switch c.Name {
	case "new", "agents", "schedules":
		// A channel's command is served where a mention would be: in a
		// channel the bot serves, or a thread of one.
		channel := c.Where
		if conv := s.conversation(c.Where); conv != nil {
			channel = conv.channel
		}
		if !s.acl().channel(channel) {
			s.tell(c.Reply, fmt.Sprintf("I don't answer in this channel; use %s in one I serve.", s.p.Usage(c.Name)))
			return
		}
	}
	switch c.Name {
	case "new":
		s.onNew(c)
		return
	case "agents":
		s.onAgents(c)
		return
	case "schedules":
		s.onSchedules(c)
		return
	case "web":
		s.onWeb(c)
		return
	}
	conv := s.conversation(c.Where)
	if conv == nil {
		s.tell(c.Reply, "Use this command inside one of my conversation threads.")
		return
	}
	access := s.acl()
	if !access.channel(conv.channel) {
		s.tell(c.Reply, "This channel is no longer served by the bot.")
		return
	}
	s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("command", c.Name).Msg("command")
	if s.onOptionCommand(c, conv) {
		return
	}
	if acts(c.Name) && !access.mayAct(conv.channel, s.starterOf(conv), c.From) {
		s.log.Info().Str("thread", conv.thread).Str("user", c.From.ID).Str("command", c.Name).Msg("command refused: not the thread's starter or an approver")
		s.tell(c.Reply, fmt.Sprintf("%s can %s this thread; you can't. You can start your own thread by mentioning me.", whoMayAct(s.starterOf(conv)), s.p.Usage(c.Name)))
		return
	}
	switch c.Name {
	case "cancel":
		if s.engine.Cancel(conv.thread, adapter.CancelledBy(c.From.display())) {
			c.Reply.Public(s.ctx, fmt.Sprintf("🛑 <@%s> cancelled the current turn.", c.From.ID))
		} else {
			s.tell(c.Reply, "Nothing is running in this thread.")
		}
	case "reset":
		s.engine.Reset(conv.thread, adapter.CancelledBy(c.From.display()+" (session reset)"))
		c.Reply.Public(s.ctx, fmt.Sprintf("🔄 <@%s> reset the session: the next message starts a fresh agent session.", c.From.ID))
	case "status":
		s.tell(c.Reply, statusText(s.engine.Status(conv.thread)))
	case "steer":
		s.onSteer(c, conv)
	case "queue":
		s.onQueue(c, conv)
	case "sessions", "resume", "fork":
		if s.sessions == nil {
			s.tell(c.Reply, "This broker does not keep agent sessions to list, resume or fork.")
			return
		}
		switch c.Name {
		case "sessions":
			s.onSessions(c, conv)
		case "resume":
			s.onResume(c, conv)
		default:
			s.onFork(c, conv)
		}
	default:
		s.tell(c.Reply, "Unknown command.")
	}
}

// acts reports whether a command acts on its thread, so that only who
// may act on it may give it: cancel, reset, steer (which interrupts),
// resume (which changes its session) and fork (which copies it).
func acts(command string) bool {
	switch command {
	case "cancel", "reset", "steer", "resume", "fork":
		return true
	}
	return false
}

// statusText describes a thread's agent for status.
func statusText(st adapter.ThreadStatus) string {
	var b strings.Builder
	state := "idle"
	if st.Busy {
		state = fmt.Sprintf("busy (turn running for %s)", time.Since(st.TurnStarted).Round(time.Second))
	}
	fmt.Fprintf(&b, "**State**: %s, %d message(s) queued\n", state, st.Queued)
	if st.Profile != "" {
		fmt.Fprintf(&b, "**Profile**: %s\n", st.Profile)
	}
	if st.Model != "" {
		fmt.Fprintf(&b, "**Model**: %s\n", st.Model)
	}
	if st.Mode != "" {
		fmt.Fprintf(&b, "**Mode**: %s\n", st.Mode)
	}
	if st.Dir != "" {
		fmt.Fprintf(&b, "**Workspace**: `%s`\n", st.Dir)
	}
	if st.PID != 0 {
		where := ""
		if st.Where != "" {
			where = fmt.Sprintf(" on agent host `%s`", st.Where)
		}
		fmt.Fprintf(&b, "**Agent**: pid %d%s, up %s\n**Session**: `%s`", st.PID, where, st.AgentUp.Round(time.Second), st.SessionID)
	} else {
		b.WriteString("**Agent**: not running (it starts with the next message)")
	}
	if u := chat.UsageText(st.Usage, nil); u != "" {
		fmt.Fprintf(&b, "\n**Context**: %s", u)
	}
	return b.String()
}

// Reaction takes a user's mark on a message: a stop mark on a message
// of one of the bot's threads, or on the message a thread was opened
// from, cancels the thread's turn when its user may act on the thread
// (see Access.mayAct). Anyone else's is ignored: counted and logged (at
// most ignoredCancelBurst lines a second), never answered in the
// thread, whose messages are bounded and not for strangers to spend.
// Marks of bots and other marks are ignored. It calls the engine's
// Cancel and returns.
func (s *Server) Reaction(r Reaction) {
	if r.Mark != MarkStop || r.From.Bot {
		return
	}
	s.mu.Lock()
	var conv *conversation
	for _, t := range r.Threads {
		if conv = s.convs[t]; conv != nil {
			break
		}
	}
	accepting := s.accepting
	s.mu.Unlock()
	if conv == nil || !accepting {
		return
	}
	access := s.acl()
	if !access.channel(conv.channel) {
		return // its turns were cancelled when the channel was taken off
	}
	if !access.mayAct(conv.channel, s.starterOf(conv), r.From) {
		s.count(&s.stats.IgnoredCancels)
		s.ignored.Info().Str("thread", conv.thread).Str("user", r.From.ID).Msg("🛑 ignored: not allowed to cancel this thread's turn")
		return
	}
	if s.engine.Cancel(conv.thread, adapter.CancelledBy(r.From.display())) {
		s.log.Info().Str("thread", conv.thread).Str("user", r.From.ID).Msg("turn cancelled by reaction")
	}
}

// ignoredCancelBurst is how many ignored stop marks a second reach the
// log: anyone who can see a thread can react, as often as they like.
const ignoredCancelBurst = 5

// Parse reads a command written as a line of text ("cancel", "model
// opus", "agent review HEAD~1", "new codex fix the build"): a command's
// name, then a word for each of its parameters, the last taking the rest
// of the line when it is Rest; an agent parameter takes a word only when
// it names an agent. Anything else (a word that is no command, more
// words than the command takes) is no command. The Server reads so what
// is written to the bot in one of its threads ("@bot cancel"); a platform
// whose slash commands come as a line of text (Slack's) may read them so
// too. Where, From and Reply are left for the caller to fill in.
func (s *Server) Parse(text string) (Command, bool) {
	agents := s.Agents()
	return ParseCommand(text, func(word string) bool { return hasAgent(agents, word) })
}

// ParseCommand reads a command written as a line of text, as
// Server.Parse does, where isAgent tells whether a word names an agent
// profile: Server.Parse with the Server's profiles, which every front
// end (the console too) reads its written commands with.
func ParseCommand(text string, isAgent func(word string) bool) (Command, bool) {
	name, rest := cutWord(text)
	spec, ok := LookupCommand(name)
	if !ok {
		return Command{}, false
	}
	args := map[string]string{}
	for _, p := range spec.Params {
		if rest == "" {
			break
		}
		if p.Rest {
			args[p.Name], rest = rest, ""
			break
		}
		word, after := cutWord(rest)
		if p.Agent && !isAgent(word) {
			continue // the words are the next parameter's
		}
		args[p.Name], rest = word, after
	}
	if rest != "" {
		return Command{}, false
	}
	return Command{Name: spec.Name, Args: args}, true
}

// LookupCommand is the command named name (in any case), from Commands.
func LookupCommand(name string) (CommandSpec, bool) {
	i := slices.IndexFunc(Commands, func(c CommandSpec) bool { return strings.EqualFold(c.Name, name) })
	if i < 0 {
		return CommandSpec{}, false
	}
	return Commands[i], true
}

// Written is how a written command spells spec for people: its name and
// its parameters in brackets ("steer [message]"), as ParseCommand reads
// them.
func (spec CommandSpec) Written() string {
	w := spec.Name
	for _, p := range spec.Params {
		w += " [" + p.Name + "]"
	}
	return w
}

// cutWord is the first word of s and what follows it, both trimmed.
func cutWord(s string) (word, rest string) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// textReply answers a command written in a thread: in the thread, the
// private answers too unless the platform can whisper them.
type textReply struct {
	s *Server
	m Message
}

func (r *textReply) Private(ctx context.Context, v View) {
	if w := r.s.whisp; w != nil {
		err := r.s.try(ctx, 3, func(ctx context.Context) error { return w.Whisper(ctx, r.m.Where, r.m.From.ID, v) })
		if err == nil {
			return
		}
		r.s.log.Debug().Err(err).Msg("private answer not whispered; answering in the thread")
	}
	v.ReplyTo = r.m.ID
	if _, err := r.s.post(ctx, r.m.Where, v); err != nil {
		r.s.log.Warn().Err(err).Msg("reply not sent")
	}
}

func (r *textReply) Public(ctx context.Context, text string) { r.s.replyTo(ctx, r.m, text) }

// Posted is the message the command was written in: it shows the turn
// the command runs.
func (r *textReply) Posted(context.Context) (Origin, error) {
	return Origin{Where: r.m.Where, ID: r.m.ID, Ref: r.m.Ref}, nil
}

func (r *textReply) Update(context.Context, View) {}
func (r *textReply) Ack(context.Context)          {}
func (r *textReply) Defer(context.Context)        {}
func (r *textReply) Form(context.Context, Form)   {}
