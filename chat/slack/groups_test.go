package slack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"acpbroker/chat/slack"
	"acpbroker/internal/fakeslack"
)

// User groups play the part of roles: allowed_groups admit their
// members, approver_groups make theirs approvers. Their members are read
// with usergroups.users.list before the app takes events and again
// every group_refresh: a member taken out loses the rights at the next
// read. When the members can no longer be read, what was read is
// forgotten after three refreshes, and nobody counts as in the group
// (fail closed).
func TestAccess_UserGroupsPlayRoles(t *testing.T) {
	const refresh = 200 * time.Millisecond
	var devs, oncall fakeslack.UserGroup
	h := newHarness(t, setup{
		slack: slack.Config{GroupRefresh: refresh},
		before: func(h *harness) {
			devs = h.srv.AddUserGroup(fakeslack.UserGroup{Handle: "devs", Members: []string{h.bob.ID}})
			oncall = h.srv.AddUserGroup(fakeslack.UserGroup{Handle: "oncall", Members: []string{h.carol.ID}})
		},
		adjust: func(h *harness, c *slack.Config) {
			c.Access = h.access(h.alice.ID)
			c.Access.AllowedRoles = []string{devs.ID}
			c.Access.ApproverRoles = []string{oncall.ID}
		},
	})
	h.answer(h.mention(h.bob, "hello"), "✅") // a member of devs

	stop := func(c conv, u fakeslack.User) {
		h.srv.AddReaction(c.channel, c.ts, u.ID, "octagonal_sign")
	}
	c := h.mention(h.alice, "hang")
	h.waitWorking(c)
	stop(c, h.carol) // a member of oncall
	h.cancelled(c, "Carol")

	h.srv.SetGroupMembers(oncall.ID)
	time.Sleep(3 * refresh)
	c = h.mention(h.alice, "hang")
	h.waitWorking(c)
	stop(c, h.carol)
	h.until("carol's 🛑 ignored", func() bool { return h.client.Stats().IgnoredCancels == 1 })
	if !h.engine.Status(c.key).Busy {
		t.Fatal("carol, out of oncall, cancelled the turn")
	}

	h.srv.InjectSlackError(fakeslack.OnMethod("usergroups.users.list"), 1000, "internal_error")
	time.Sleep(4 * refresh)
	refused := h.srv.PostMessage(h.channel, h.bob.ID, h.srv.Bot().Mention()+" hello again")
	h.srv.Await("🚫 for bob", func() bool { return h.hasReaction(h.channel, refused, "no_entry_sign") })
	if n := len(h.srv.CallsTo("usergroups.users.list")); n < 6 {
		t.Fatalf("the groups were read %d times", n)
	}
}

// Fifty threads at once, in ten channels, each with its own agent: every
// one is answered, within Slack's limits (no 429), and the broker holds
// fifty conversations.
func TestMany_FiftyThreadsAtOnce(t *testing.T) {
	h := newHarness(t, setup{
		fake: fakeslack.Options{WaitTimeout: 2 * time.Minute},
		pool: poolOf(50),
		adjust: func(h *harness, c *slack.Config) {
			c.Access.AllowedChannels = nil
			c.Access.AllowAllChannels = true
		},
	})
	var channels []string
	for i := range 10 {
		channels = append(channels, h.srv.AddChannel(fakeslack.Channel{Name: fmt.Sprintf("team-%d", i)}).ID)
	}
	var convs []conv
	for i := range 50 {
		u := []fakeslack.User{h.alice, h.bob, h.carol}[i%3]
		convs = append(convs, h.mentionIn(channels[i%10], u, fmt.Sprintf("stream 3 %dms", 50+i)))
	}
	sessions := map[string]bool{}
	for _, c := range convs {
		if got := joined(h.answer(c, "✅ done")); !strings.HasPrefix(got, chunks(3)) {
			t.Fatalf("%s answered %q", c.key, got)
		}
		sessions[h.engine.Status(c.key).SessionID] = true
	}
	if len(sessions) != 50 {
		t.Fatalf("%d agent sessions for 50 threads", len(sessions))
	}
	if n := h.client.Stats().Conversations; n != 50 {
		t.Fatalf("%d conversations held", n)
	}
	if rl := h.srv.RateLimited(); len(rl) > 0 {
		t.Fatalf("%d calls met a 429, the first %s", len(rl), rl[0].Method)
	}
}
