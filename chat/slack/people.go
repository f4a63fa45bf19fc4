package slack

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"acpbroker/chat/thread"
	"acpbroker/internal/ttlcache"
)

// users knows the names of the workspace's users, as users.info tells
// them, for a while: what a thread shows ("cancelled by Alice") and the
// audit trail keeps.
type users struct {
	c     *Client
	mu    sync.Mutex
	names *ttlcache.Cache[string, userName]
}

type userName struct {
	name, handle string
	ok           bool      // users.info answered; a failure is remembered for a short while
	at           time.Time // when it was looked up
}

// A user's name is kept for userTTL; a failed lookup is not tried again
// for userRetry. A lookup waits at most userLookup: the name is a
// courtesy, and Slack shows <@U…> as the name anyway.
const (
	userTTL    = time.Hour
	userRetry  = time.Minute
	userLookup = 2 * time.Second
)

func newUsers(c *Client) *users {
	return &users{c: c, names: ttlcache.New[string, userName](4096, userTTL, nil)}
}

// user is the user id as package thread takes it: with the name when
// known (looked up at most userLookup, never waiting for a rate limit),
// the user groups of the access lists the user is in, and bot when the
// message came from a bot.
func (c *Client) user(ctx context.Context, id string, bot bool) thread.User {
	u := thread.User{ID: id, Bot: bot, Roles: c.groups.of(id)}
	if !bot {
		u.Name, u.Handle = c.users.lookup(ctx, id)
	}
	return u
}

func (u *users) lookup(ctx context.Context, id string) (name, handle string) {
	now := time.Now()
	u.mu.Lock()
	n, known := u.names.Get(id)
	u.mu.Unlock()
	if known && (n.ok || now.Sub(n.at) < userRetry) {
		return n.name, n.handle
	}
	ctx, cancel := context.WithTimeout(ctx, userLookup)
	defer cancel()
	c := u.c
	err := c.call(ctx, "users.info", "", false, func(ctx context.Context) error {
		info, err := c.api.GetUserInfoContext(ctx, id)
		if err != nil {
			return err
		}
		n = userName{name: info.Profile.DisplayName, handle: info.Name, ok: true, at: now}
		if n.name == "" {
			n.name = info.RealName
		}
		return nil
	})
	if err != nil {
		c.log.Debug().Err(err).Str("user", id).Msg("user's name not known")
		n = userName{at: now}
	}
	u.mu.Lock()
	u.names.Put(id, n)
	u.mu.Unlock()
	return n.name, n.handle
}

// groups knows the members of the user groups the access lists name
// (usergroups.users.list), read again every GroupRefresh. Membership
// not read again within three times that is forgotten, so that a
// member removed while Slack does not answer does not keep their
// rights: nobody counts as in a group whose members are unknown.
type groups struct {
	c       *Client
	mu      sync.Mutex
	members map[string]groupMembers // by group id: the listed groups alone
}

type groupMembers struct {
	users []string
	at    time.Time
}

func newGroups(c *Client) *groups { return &groups{c: c, members: map[string]groupMembers{}} }

// listed are the user groups the access lists name.
func (c *Client) listedGroups() []string {
	a := c.Access()
	var out []string
	for _, g := range append(slices.Clone(a.AllowedRoles), a.ApproverRoles...) {
		if g != "" && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// of are the listed groups user is known to be in.
func (g *groups) of(user string) []string {
	stale := 3 * g.c.cfg.GroupRefresh
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for id, m := range g.members {
		if time.Since(m.at) <= stale && slices.Contains(m.users, user) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// refreshGroups reads the members of each listed group, and forgets the
// groups no longer listed. A group that cannot be read keeps what was
// read of it (until it is stale, see of).
func (c *Client) refreshGroups(ctx context.Context) {
	listed := c.listedGroups()
	g := c.groups
	g.mu.Lock()
	for id := range g.members {
		if !slices.Contains(listed, id) {
			delete(g.members, id)
		}
	}
	g.mu.Unlock()
	for _, id := range listed {
		var members []string
		err := c.do(ctx, "usergroups.users.list", "", 3, func(ctx context.Context) (err error) {
			members, err = c.api.GetUserGroupMembersContext(ctx, id)
			return err
		})
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn().Err(err).Str("group", id).Msg("members of a user group not read; kept as they were, for a while")
			}
			continue
		}
		still := slices.Contains(c.listedGroups(), id)
		g.mu.Lock()
		if still {
			g.members[id] = groupMembers{users: members, at: time.Now()}
		}
		g.mu.Unlock()
	}
}

// groupLoop reads the groups again every GroupRefresh, and at once when
// the access lists change.
func (c *Client) groupLoop() {
	t := time.NewTicker(c.cfg.GroupRefresh)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.regroup:
		case <-c.ctx.Done():
			return
		}
		c.refreshGroups(c.ctx)
	}
}

// userRef is a reference to a user as Slack writes it, <@U…> or
// <@U…|label>.
var userRef = regexp.MustCompile(`<@([A-Z0-9]+)(?:\|[^>]*)?>`)

// unping writes each user reference in text as the user's name, "@name"
// (or "@" and the id while the name is not known), so that nothing the
// app posts notifies anyone: a Slack mention in a bot's message would,
// and an agent's answer may hold any. It asks Slack for nothing.
func (c *Client) unping(text string) string {
	if !strings.Contains(text, "<@") {
		return text
	}
	return userRef.ReplaceAllStringFunc(text, func(ref string) string {
		id := userRef.FindStringSubmatch(ref)[1]
		c.users.mu.Lock()
		n, known := c.users.names.Get(id)
		c.users.mu.Unlock()
		switch {
		case known && n.name != "":
			return "@" + n.name
		case known && n.handle != "":
			return "@" + n.handle
		}
		return "@" + id
	})
}
