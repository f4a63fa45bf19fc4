package chat

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"acpbroker/adapter"
	"acpbroker/policy"
)

// NoticeText says the engine's notice n in the broker's Markdown: the
// one place its words are written, for every platform and the API. Text
// from the agent (a tool's title, a question) is quoted as it came.
func NoticeText(n adapter.Notice) string {
	switch n := n.(type) {
	case adapter.SessionLost:
		return "The agent could not resume this thread's earlier conversation, so this is a new session: it does not remember what was said before."
	case adapter.HostLost:
		return fmt.Sprintf("This thread's agent now runs on agent host %s, in a fresh workspace: the files of its earlier one stayed on %s, which is lost to it.", n.To, n.From)
	case adapter.ImagesLeftOut:
		return fmt.Sprintf("This agent does not accept images; %d image(s) were left out.", n.Count)
	case adapter.NetworkRefused:
		if n.Host == "" { // not for a host: too many connections at once
			return fmt.Sprintf("The agent's network connection was refused: %s.", n.Reason)
		}
		return fmt.Sprintf("The agent tried to reach %s, which its profile does not allow (%s); it was refused.",
			net.JoinHostPort(n.Host, strconv.Itoa(n.Port)), n.Reason)
	case adapter.PermissionDecided:
		word := "Allowed"
		if n.Action == policy.Deny {
			word = "Denied"
		}
		return fmt.Sprintf("%s “%s” by %s.", word, n.Tool, deciderText(n.By))
	case adapter.PermissionNoOption:
		verb := "allows"
		if n.Action == policy.Deny {
			verb = "denies"
		}
		return fmt.Sprintf("“%s” answered cancelled: %s %s it, but the agent offers no %s option.", n.Tool, deciderText(n.By), verb, n.Missing)
	case adapter.PermissionTimedOut:
		return fmt.Sprintf("Permission for %q was not answered within %s; answered cancelled.", n.Tool, durationText(n.After))
	case adapter.QuestionUnaskable:
		names := make([]string, len(n.Fields))
		for i := range n.Fields {
			names[i] = fmt.Sprintf("%s (%s)", n.Fields[i].Label(), n.Fields[i].Type)
		}
		return fmt.Sprintf("The agent asked “%s”, but it has fields that cannot be asked here: %s; answered decline.", questionText(n.Question), strings.Join(names, ", "))
	case adapter.QuestionInvalid:
		return fmt.Sprintf("The agent asked “%s”, but %v; answered decline.", questionText(n.Question), n.Err)
	case adapter.QuestionUnanswerable:
		return fmt.Sprintf("The agent asked “%s”, but questions cannot be answered here; answered decline.", questionText(n.Question))
	case adapter.QuestionTimedOut:
		return fmt.Sprintf("The agent's question “%s” was not answered within %s; answered cancel.", questionText(n.Question), durationText(n.After))
	case adapter.ChoiceNotApplied:
		if n.Value == "" {
			return fmt.Sprintf("Your choice for %s was not applied: %v.", n.Option, n.Err)
		}
		return fmt.Sprintf("Your choice %s for %s was not applied: %v.", n.Value, n.Option, n.Err)
	case adapter.ModeNotApplied:
		if n.Gone {
			return fmt.Sprintf("Your choice of mode %s was not applied: the agent no longer offers it.", n.Mode)
		}
		return fmt.Sprintf("Your choice of mode %s was not applied: %v.", n.Mode, n.Err)
	}
	// Every notice the engine makes is said above; a new one not yet
	// written here still reaches the thread, by its kind.
	return "The broker noted " + n.Kind() + "."
}

// IdleHostLostText says that agent host host, which ran a thread's idle
// agent, was lost: the agent is gone, and the thread's next message
// starts another on another host. shared: the host pushed the thread's
// branch to a shared repository, so its committed work follows it.
func IdleHostLostText(host string, shared bool) string {
	files := "the files of its workspace stayed on " + host
	if shared {
		files = "what its agent committed follows the thread, through the shared repository; what it left uncommitted stayed on " + host
	}
	return fmt.Sprintf("Agent host %s, which ran this thread's agent, stopped answering: the agent is gone. Your next message starts a new one on another agent host; %s.", host, files)
}

// PushFailedText says that agent host host could not push the thread's
// branch to the shared repository after a turn, and why, as the host
// said it (on one line): the work the agent committed since is on that
// host alone.
func PushFailedText(host, why string) string {
	return fmt.Sprintf("This thread's branch could not be pushed to the shared repository: %s. Its committed work stays on agent host %s until a push succeeds.",
		strings.TrimSuffix(strings.Join(strings.Fields(why), " "), "."), host)
}

// deciderText names what answered a permission request for people: `rule
// 1 (kind read)`, `turn.permission_mode = allow`.
func deciderText(d adapter.Decider) string {
	if d.N > 0 {
		return fmt.Sprintf("rule %d (%s)", d.N, d.Rule)
	}
	setting := d.Setting
	if setting == "" {
		setting = "the prompt's permission mode"
	}
	return setting + " = " + d.Mode
}

// questionText is the agent's question in a few words: on one line,
// at most 120 characters.
func questionText(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if q == "" {
		return "a question"
	}
	if r := []rune(q); len(r) > 120 {
		q = string(r[:119]) + "…"
	}
	return q
}

// durationText says d as a setting would be written: 30m rather than
// 30m0s, 2h rather than 2h0m0s.
func durationText(d time.Duration) string {
	s := d.String()
	if cut, ok := strings.CutSuffix(s, "0s"); ok && strings.HasSuffix(cut, "m") {
		s = cut
	}
	if cut, ok := strings.CutSuffix(s, "0m"); ok && strings.HasSuffix(cut, "h") {
		s = cut
	}
	return s
}

// StatusText says a prompt's phase in words: "queued behind 2 other
// message(s)", "waiting for a free agent slot", "stopping: …".
func StatusText(st adapter.Status) string {
	switch st.Phase {
	case adapter.PhaseQueued:
		return fmt.Sprintf("queued behind %d other message(s)", st.Position)
	case adapter.PhaseNext:
		if st.Interrupting {
			return "sent next: the running turn is being interrupted"
		}
		return "sent next"
	case adapter.PhaseWaitingForSlot:
		return "waiting for a free agent slot"
	case adapter.PhaseWaitingForHost:
		return "waiting for an agent host with room for this thread's agent"
	case adapter.PhaseWorking:
		return "working"
	case adapter.PhaseCancelling:
		if st.Cause == nil {
			return "stopping"
		}
		return "stopping: " + st.Cause.Error()
	}
	return ""
}
