package thread

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Schedules are the broker's schedules whose runs a platform shows, as
// the schedules command lists and drives them. Its methods must not
// block for long.
type Schedules interface {
	List() []ScheduleInfo
	// Run starts a run of the schedule now and says where, in words.
	Run(name string, by User) (string, error)
	// Pause pauses the schedule (paused) or resumes it.
	Pause(name string, paused bool, by User) error
}

// ScheduleInfo is one schedule as the schedules command shows it.
type ScheduleInfo struct {
	Name, Spec string
	// Where says where its runs go, in the broker's Markdown.
	Where string
	// Next is when it runs next (zero: not while paused or disabled).
	Next                     time.Time
	Enabled, Paused, Running bool
	// Last says how its last run went ("" if it never ran); LastLink
	// links to it.
	Last, LastLink string
	// Approvers may run and pause it, besides the platform's.
	Approvers []string
}

// SetSchedules gives the Server the schedules its platform shows (nil:
// none).
func (s *Server) SetSchedules(sch Schedules) {
	s.mu.Lock()
	s.schedules = sch
	s.mu.Unlock()
}

// onSchedules serves the schedules command: without an action it lists
// them; run, pause and resume are for approvers (the platform's, or the
// schedule's own).
func (s *Server) onSchedules(c Command) {
	s.mu.Lock()
	sch := s.schedules
	s.mu.Unlock()
	if sch == nil {
		s.tell(c.Reply, "No schedules are configured here.")
		return
	}
	list := sch.List()
	action, name := strings.ToLower(c.Args["action"]), c.Args["name"]
	if action == "" || action == "list" {
		s.tell(c.Reply, s.describeSchedules(list))
		return
	}
	if action != "run" && action != "pause" && action != "resume" {
		s.tell(c.Reply, fmt.Sprintf("Unknown action %q: use run, pause or resume, with the schedule's name (%s).", action, s.p.Usage("schedules", Arg{Name: "action", Value: "run"}, Arg{Name: "name"})))
		return
	}
	i := slices.IndexFunc(list, func(info ScheduleInfo) bool { return strings.EqualFold(info.Name, name) })
	if i < 0 {
		s.tell(c.Reply, fmt.Sprintf("There is no schedule %q here.\n%s", name, s.describeSchedules(list)))
		return
	}
	info := list[i]
	if !s.acl().approver(c.From) && !slices.Contains(info.Approvers, c.From.ID) {
		s.log.Info().Str("user", c.From.ID).Str("schedule", info.Name).Str("action", action).Msg("schedules: refused, not an approver")
		s.tell(c.Reply, fmt.Sprintf("An approver can %s **%s**; you can't.", action, info.Name))
		return
	}
	s.log.Info().Str("user", c.From.ID).Str("schedule", info.Name).Str("action", action).Msg("schedules")
	switch action {
	case "run":
		where, err := sch.Run(info.Name, c.From)
		if err != nil {
			s.tell(c.Reply, fmt.Sprintf("**%s** did not run: %v", info.Name, err))
			return
		}
		c.Reply.Public(s.ctx, fmt.Sprintf("▶️ <@%s> ran **%s** now: %s", c.From.ID, info.Name, where))
	default:
		paused := action == "pause"
		if err := sch.Pause(info.Name, paused, c.From); err != nil {
			s.tell(c.Reply, fmt.Sprintf("**%s**: %v", info.Name, err))
			return
		}
		verb := "resumed"
		if paused {
			verb = "paused"
		}
		c.Reply.Public(s.ctx, fmt.Sprintf("⏯️ <@%s> %s **%s**.", c.From.ID, verb, info.Name))
	}
}

// describeSchedules lists schedules for people, within a message.
func (s *Server) describeSchedules(list []ScheduleInfo) string {
	if len(list) == 0 {
		return "No schedules are configured here."
	}
	var b strings.Builder
	b.WriteString("**Schedules**\n")
	for _, info := range list {
		line := fmt.Sprintf("- **%s** `%s` in %s", info.Name, info.Spec, info.Where)
		switch {
		case !info.Enabled:
			line += " · disabled"
		case info.Paused:
			line += " · ⏸️ paused"
		case !info.Next.IsZero():
			line += " · next " + info.Next.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		if info.Running {
			line += " · running now"
		}
		if info.Last != "" {
			line += " · last: " + info.Last
			if info.LastLink != "" {
				line += " (" + info.LastLink + ")"
			}
		}
		if b.Len()+len(line) > s.listLimit() {
			b.WriteString("- …")
			break
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "-# An approver runs one now, pauses or resumes it: %s", s.p.Usage("schedules", Arg{Name: "action", Value: "run"}, Arg{Name: "name"}))
	return b.String()
}
