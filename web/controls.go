package web

import (
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"acpbroker/acp"
	"acpbroker/adapter"
	"acpbroker/chat/thread"
)

// Controls is what a platform's threads offer a thread's page beyond
// Threads (thread.Server): the queue, the agent's options and sessions,
// and the link to the thread in the chat. Each is done as the chat's own
// command or button does it, checked by the thread layer's rule.
type Controls interface {
	CommandFor(ctx context.Context, thread string, u thread.User, via, name string, args map[string]string) (said string, err error)
	Options(thread string) adapter.ThreadOptions
	QueueFor(thread string, u thread.User) []thread.WaitingMessage
	SendNowFor(thread, key string, u thread.User, via string) error
	RemoveFor(thread, key string, u thread.User, via string) error
	MessageLink(ref string) string
}

var _ Controls = (*thread.Server)(nil)

// choiceShot is one of the agent's options as a page offers it: a
// select whose form gives command (model, mode, config) with the value
// chosen.
type choiceShot struct {
	Command, Option string // Option: config's option id
	Name, Current   string
	Choices         []adapter.Choice
}

// choices are the options o offers, as selects: the model, the mode,
// then the agent's other options, each with the values it may take.
func choices(o adapter.ThreadOptions) []choiceShot {
	var out []choiceShot
	model, hasModel := o.Model()
	if hasModel {
		out = append(out, choiceShot{Command: "model", Name: model.Name, Current: model.Current(), Choices: adapter.Choices(model)})
	}
	mode, hasMode := o.ModeOption()
	if cs := o.ModeChoices(); len(cs) > 0 {
		cur := mode.Value
		if !hasMode && o.Modes != nil {
			cur = o.Modes.Current
		}
		out = append(out, choiceShot{Command: "mode", Name: "Mode", Current: cur, Choices: cs})
	}
	for _, opt := range o.Options {
		if (hasModel && opt.ID == model.ID) || (hasMode && opt.ID == mode.ID) {
			continue
		}
		cur := opt.Value
		if opt.Type == acp.ConfigBoolean {
			cur = "false"
			if opt.On {
				cur = "true"
			}
		}
		out = append(out, choiceShot{Command: "config", Option: opt.ID, Name: opt.Name, Current: cur, Choices: adapter.Choices(opt)})
	}
	// An option of a kind the broker cannot offer (no choices) has no
	// select.
	return slices.DeleteFunc(out, func(c choiceShot) bool { return len(c.Choices) == 0 })
}

// platformNames name the chat platforms people know by another spelling.
var platformNames = map[string]string{"discord": "Discord", "slack": "Slack", "console": "the console"}

// platformName is a platform's name for people.
func platformName(p string) string {
	if n, ok := platformNames[p]; ok {
		return n
	}
	return p
}

// controls fills d's queue, options and chat link from the platform's
// Controls, when it has them.
func (s *Server) controls(t Threads, k key, u thread.User, snap snapshot, d *threadData) {
	c, ok := t.(Controls)
	if !ok {
		return
	}
	d.Queue = c.QueueFor(k.thread, u)
	if d.MayAct {
		d.Choices = choices(c.Options(k.thread))
	}
	for i := len(snap.Turns) - 1; i >= 0 && d.ChatLink == ""; i-- {
		d.ChatLink = c.MessageLink(snap.Turns[i].Ref)
	}
	d.ChatName = platformName(k.platform)
}

// maxValueBytes bounds a session's id given on a page.
const maxValueBytes = 1 << 10

// offered reports whether the agent offers value for command's option
// (config's: option), as the page's selects offer it.
func offered(o adapter.ThreadOptions, command, option, value string) bool {
	for _, c := range choices(o) {
		if c.Command != command || c.Option != option {
			continue
		}
		for _, ch := range c.Choices {
			if ch.Value == value {
				return true
			}
		}
	}
	return false
}

// controlled is the thread a control's request names, when the person
// may see it and its chat has the web's Controls; otherwise it answers
// the request (refused, or unknown as none: that chat's words) and ok
// is false. path is the thread's page.
func (s *Server) controlled(w http.ResponseWriter, r *http.Request, ss session, none string) (c Controls, k key, path string, ok bool) {
	t, k, ok := s.seen(w, r, ss)
	if !ok {
		return nil, k, "", false
	}
	path = threadPath(k.platform, k.thread)
	if c, ok = t.(Controls); !ok {
		acted(w, r, path, http.StatusNotFound, none)
	}
	return c, k, path, ok
}

// choose changes one of the agent's options as /model, /mode or /config
// would.
func (s *Server) choose(w http.ResponseWriter, r *http.Request, ss session) {
	c, k, path, ok := s.controlled(w, r, ss, "This chat offers no choices here.")
	if !ok {
		return
	}
	command, value := r.PostFormValue("command"), r.PostFormValue("value")
	args := map[string]string{"value": value}
	switch command {
	case "model", "mode":
	case "config":
		args["option"] = r.PostFormValue("option")
	default:
		acted(w, r, path, http.StatusBadRequest, "Choose a model, a mode or an option.")
		return
	}
	if !offered(c.Options(k.thread), command, args["option"], value) {
		acted(w, r, path, http.StatusBadRequest, "Choose one of the values the agent offers.")
		return
	}
	s.command(w, r, ss, c, k, command, args)
}

// session resumes one of the agent's earlier sessions, or forks the
// thread, as /resume and /fork would.
func (s *Server) sessionCommand(w http.ResponseWriter, r *http.Request, ss session) {
	c, k, path, ok := s.controlled(w, r, ss, "This chat offers no sessions here.")
	if !ok {
		return
	}
	switch command := r.PostFormValue("command"); command {
	case "fork":
		s.command(w, r, ss, c, k, "fork", nil)
	case "resume":
		id := strings.TrimSpace(r.PostFormValue("session"))
		if id == "" || len(id) > maxValueBytes {
			acted(w, r, path, http.StatusBadRequest, "Name the session to resume.")
			return
		}
		s.command(w, r, ss, c, k, "resume", map[string]string{"session": id})
	default:
		acted(w, r, path, http.StatusBadRequest, "Resume a session or fork the thread.")
	}
}

// command gives a thread's command for the signed-in person and says
// what came of it.
func (s *Server) command(w http.ResponseWriter, r *http.Request, ss session, c Controls, k key, name string, args map[string]string) {
	path := threadPath(k.platform, k.thread)
	said, err := c.CommandFor(r.Context(), k.thread, ss.person.User, via, name, args)
	names := s.names(c, k, ss)
	switch {
	case err == thread.ErrNotAllowed:
		acted(w, r, path, http.StatusForbidden, err.Error())
	case err != nil:
		acted(w, r, path, http.StatusConflict, plain(err.Error(), names))
	default:
		acted(w, r, path, http.StatusOK, plain(said, names))
	}
}

// queued sends a waiting message now, or removes it, as its note's
// buttons would.
func (s *Server) queued(w http.ResponseWriter, r *http.Request, ss session) {
	c, k, path, ok := s.controlled(w, r, ss, "This chat shows no queue here.")
	if !ok {
		return
	}
	key := r.PostFormValue("key")
	var err error
	done := ""
	switch r.PostFormValue("action") {
	case "send-now":
		err, done = c.SendNowFor(k.thread, key, ss.person.User, via), "Sent next: the running turn is being interrupted."
	case "remove":
		err, done = c.RemoveFor(k.thread, key, ss.person.User, via), "Removed."
	default:
		acted(w, r, path, http.StatusBadRequest, "Send a waiting message now, or remove it.")
		return
	}
	switch {
	case err == thread.ErrNotWaiting:
		acted(w, r, path, http.StatusConflict, "This message is no longer waiting.")
	case err != nil:
		acted(w, r, path, http.StatusForbidden, plain(err.Error(), s.names(c, k, ss)))
	default:
		acted(w, r, path, http.StatusOK, done)
	}
}

var (
	mention  = regexp.MustCompile(`<([@#])([^>\s]+)>`)
	emphasis = strings.NewReplacer("**", "", "`", "", "-# ", "")
)

// plain is a chat message's text as a page's plain words, without the
// chat's emphasis: a person named as the chat shows them, @ and their
// name in names (by id), else @ and their id; a thread by its id.
func plain(text string, names map[string]string) string {
	text = mention.ReplaceAllStringFunc(text, func(m string) string {
		sub := mention.FindStringSubmatch(m)
		if n := names[sub[2]]; sub[1] == "@" && n != "" {
			return "@" + n
		}
		return sub[1] + sub[2]
	})
	return emphasis.Replace(text)
}

// names are the names of the people a command's answer on k may
// mention, by id: the person acting, and the authors of the messages
// waiting.
func (s *Server) names(c Controls, k key, ss session) map[string]string {
	out := map[string]string{ss.person.User.ID: ss.person.name()}
	for _, m := range c.QueueFor(k.thread, ss.person.User) {
		if m.AuthorID != "" && m.Author != "" {
			out[m.AuthorID] = m.Author
		}
	}
	return out
}
