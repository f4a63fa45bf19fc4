package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // a schedule's time zone is known wherever the broker runs

	"github.com/robfig/cron/v3"
)

// Schedule is one [[schedules]] table: a prompt the broker submits
// itself, when its expression says.
type Schedule struct {
	// Key is the table's key in errors: "schedules[2]".
	Key  string
	Name string
	// Spec is the expression as written; When reads it.
	Spec string
	When cron.Schedule
	// Platform is the chat platform its runs are shown on (the only one
	// served, when it names none); Channel the channel each run opens a
	// thread in, or Thread the thread every run writes into.
	Platform, Channel, Thread string
	// Agent is the profile its threads get ("": the channel's, or the
	// default).
	Agent  string
	Prompt string
	// PermissionMode is ask, allow or deny ("": turn.permission_mode).
	PermissionMode string
	// Approvers may answer its runs' permission requests and run it now
	// or pause it, besides the platform's approvers.
	Approvers []string
	Enabled   bool
	// CatchUp runs it once at start when a run was due while the broker
	// was down.
	CatchUp bool
}

// schedulesField is the array of [[schedules]] tables.
const schedulesField = "schedules"

// scheduleKeys are the keys one [[schedules]] table may have.
var scheduleKeys = []string{"name", "schedule", "platform", "channel", "thread", "agent", "prompt", "permission_mode", "approvers", "enabled", "catch_up"}

// scheduleName is what a schedule may be called: it names its threads
// and is typed in /schedules.
var scheduleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// cronParser reads a schedule's expression: five fields (minute, hour,
// day of month, month, day of week) with an optional CRON_TZ= or TZ=
// time zone first, or a descriptor (@daily, @every 10m).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule reads a schedule's expression as [[schedules]] takes it.
func ParseSchedule(spec string) (cron.Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("is empty")
	}
	if d, ok := strings.CutPrefix(s, "@every "); ok {
		// The parser would round a shorter interval up to a second.
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && every < time.Second {
			return nil, fmt.Errorf("@every %s is more often than once a second", every)
		}
	}
	return cronParser.Parse(s)
}

// readSchedules reads the [[schedules]] tables of the file (doc is the
// file as go-toml read it, keys as written); c's platforms, profiles and
// channels are read already.
func (r *reader) readSchedules(doc map[string]any, c *Config) {
	raw := foldGet(doc, schedulesField)
	if raw == nil {
		r.vals[schedulesField] = "[]"
		return
	}
	list, ok := raw.([]any)
	if !ok {
		r.fail(schedulesField, "must be an array of tables: write a [[schedules]] table for each schedule")
		return
	}
	var described []string
	names := map[string]string{}
	for i, item := range list {
		key := fmt.Sprintf("%s[%d]", schedulesField, i)
		tbl, ok := item.(map[string]any)
		if !ok {
			r.fail(key, "must be a table with at least name, schedule, channel (or thread) and prompt")
			continue
		}
		t := table{r: r, key: key, tbl: map[string]any{}}
		var unknown []string
		for k, v := range tbl {
			if lk := strings.ToLower(k); slices.Contains(scheduleKeys, lk) {
				t.tbl[lk] = v
			} else {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			slices.Sort(unknown)
			r.fail(key, "has unknown key(s): %s (known: %s)", strings.Join(unknown, ", "), strings.Join(scheduleKeys, ", "))
		}
		s := Schedule{Key: key, Name: t.str("name"), Spec: t.str("schedule"), Platform: t.str("platform"), Channel: t.str("channel"),
			Thread: t.str("thread"), Agent: t.str("agent"), Prompt: t.str("prompt"), PermissionMode: t.str("permission_mode"),
			Approvers: t.strs("approvers"), Enabled: t.boolean("enabled", true), CatchUp: t.boolean("catch_up", false)}
		switch {
		case s.Name == "":
			t.fail("name", "is required: it names the schedule's threads and is given to /schedules")
		case !scheduleName.MatchString(s.Name):
			t.fail("name", "= %q is not a schedule name: up to 64 letters, digits, '.', '-' and '_'", s.Name)
		case names[strings.ToLower(s.Name)] != "":
			t.fail("name", "= %q is the name of %s too: each schedule needs its own", s.Name, names[strings.ToLower(s.Name)])
		default:
			names[strings.ToLower(s.Name)] = key
		}
		if when, err := ParseSchedule(s.Spec); err != nil {
			t.fail("schedule", "= %q is not a schedule (five cron fields with an optional CRON_TZ=Zone first, @daily, @hourly…, or @every 10m): %v", s.Spec, err)
		} else {
			s.When = when
		}
		r.checkSchedulePlace(&t, &s, c)
		if s.Agent != "" && c.Profiles[s.Agent] == nil {
			t.fail("agent", "= %q is not a profile: one of %s", s.Agent, strings.Join(sortedKeys(c.Profiles), ", "))
		}
		if strings.TrimSpace(s.Prompt) == "" {
			t.fail("prompt", "is required: what the agent is asked at each run")
		}
		if s.PermissionMode != "" && !slices.Contains([]string{"ask", "allow", "deny"}, s.PermissionMode) {
			t.fail("permission_mode", "= %q must be one of ask, allow, deny", s.PermissionMode)
		}
		c.Schedules = append(c.Schedules, s)
		described = append(described, fmt.Sprintf("%s: %q on %s %s%s agent=%q mode=%q approvers=%v enabled=%v catch_up=%v prompt=%q",
			s.Name, s.Spec, s.Platform, s.Channel, s.Thread, s.Agent, s.PermissionMode, s.Approvers, s.Enabled, s.CatchUp, s.Prompt))
	}
	r.vals[schedulesField] = "[" + strings.Join(described, "; ") + "]"
}

// checkSchedulePlace checks where a schedule's runs are shown: a
// platform served, and a channel it serves or a thread.
func (r *reader) checkSchedulePlace(t *table, s *Schedule, c *Config) {
	served := c.Chat.Platforms
	switch {
	case len(served) == 0:
		t.fail("platform", "has no chat platform to run on: chat.platform = \"none\" serves the API alone, and a schedule's runs are shown in a chat")
		return
	case slices.Contains(served, Console):
		t.fail("platform", "has no chat platform to run on: the console takes no schedules; name a chat platform in chat.platform")
		return
	case s.Platform == "" && len(served) == 1:
		s.Platform = served[0]
	case s.Platform == "":
		t.fail("platform", "is required with several chat platforms: one of %s", strings.Join(served, ", "))
		return
	case !slices.Contains(served, s.Platform):
		t.fail("platform", "= %q is not a platform chat.platform serves: one of %s", s.Platform, strings.Join(served, ", "))
		return
	}
	switch {
	case s.Channel == "" && s.Thread == "":
		t.fail("channel", "is required: the channel each run opens a thread in (or thread: the one thread every run writes into)")
	case s.Channel != "" && s.Thread != "":
		t.fail("thread", "and channel are both set: a schedule runs in a new thread of its channel, or in its one thread")
	case s.Channel != "" && s.Platform == "discord" && !c.Discord.AllowAllChannels &&
		!slices.Contains(c.Discord.AllowedChannels, s.Channel) && c.Channels[s.Channel] == "":
		t.fail("channel", "= %q is not a channel the bot serves: list it in discord.allowed_channels (or give it a [channels.\"%s\"] table)", s.Channel, s.Channel)
	case s.Channel != "" && s.Platform == "slack" && !c.Slack.AllowAllChannels &&
		!slices.Contains(c.Slack.AllowedChannels, s.Channel) && c.Channels[s.Channel] == "":
		t.fail("channel", "= %q is not a channel the app serves: list it in slack.allowed_channels (or give it a [channels.\"%s\"] table)", s.Channel, s.Channel)
	}
}

// table reads one table of an array of tables, its keys in lower case.
type table struct {
	r   *reader
	key string
	tbl map[string]any
}

func (t *table) fail(field, format string, args ...any) {
	t.r.fail(t.key+"."+field, format, args...)
}

func (t *table) str(field string) string {
	v, ok := t.tbl[field]
	if !ok {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		t.fail(field, "must be a string")
	}
	return s
}

func (t *table) strs(field string) []string {
	v, ok := t.tbl[field]
	if !ok {
		return nil
	}
	list, ok := v.([]any)
	out := make([]string, 0, len(list))
	for _, item := range list {
		s, isStr := item.(string)
		ok = ok && isStr
		out = append(out, s)
	}
	if !ok {
		t.fail(field, "must be a list of strings")
	}
	return out
}

func (t *table) boolean(field string, def bool) bool {
	v, ok := t.tbl[field]
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		t.fail(field, "must be true or false")
	}
	return b
}
