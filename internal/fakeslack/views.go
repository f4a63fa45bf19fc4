package fakeslack

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// maxViewStack is how many views a user's modal stack holds.
const maxViewStack = 3

// maxViewSize bounds a view's JSON (view_too_large).
const maxViewSize = 250 << 10

type view struct {
	View
	obj map[string]any // the view as the bot sent it, block ids added
}

func (v *view) snapshot() View {
	out := v.View
	out.Blocks = slices.Clone(v.Blocks)
	out.Errors = maps.Clone(v.Errors)
	return out
}

// viewArg reads and checks the view argument of a views.* call.
func (s *Server) viewArg(c *call) (map[string]any, reply) {
	raw, ok := c.jsonArg("view")
	if !ok {
		return nil, failMessages("invalid_arguments", []problem{{"missing required field: view", "/view"}})
	}
	if len(raw) > maxViewSize {
		return nil, fail("view_too_large")
	}
	var obj map[string]any
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return nil, failMessages("invalid_arguments", []problem{{"failed to match all allowed schemas", "/view"}})
	}
	if problems := checkView(obj); len(problems) > 0 {
		return nil, failMessages("invalid_arguments", problems)
	}
	if blocks, ok := obj["blocks"].([]any); ok {
		for _, b := range blocks {
			if bo, ok := b.(map[string]any); ok {
				fillIDs(bo)
			}
		}
	}
	return obj, nil
}

// useTriggerLocked spends a trigger_id and returns the user it was
// handed to.
func (s *Server) useTriggerLocked(id string, now time.Time) (string, reply) {
	t := s.triggers[id]
	switch {
	case t == nil:
		return "", fail("invalid_trigger_id")
	case t.used:
		return "", fail("exchanged_trigger_id")
	case now.Sub(t.issued) > s.opts.TriggerLifetime:
		return "", fail("expired_trigger_id")
	}
	t.used = true
	return t.user, nil
}

// externalTakenLocked reports whether another open view has externalID.
func (s *Server) externalTakenLocked(externalID, except string) bool {
	if externalID == "" {
		return false
	}
	for _, v := range s.views {
		if v.Open && v.ID != except && v.ExternalID == externalID {
			return true
		}
	}
	return false
}

// setViewLocked fills a view from the object the bot sent.
func (s *Server) setViewLocked(v *view, obj map[string]any, now time.Time) {
	v.obj = obj
	str := func(k string) string { x, _ := obj[k].(string); return x }
	text := func(k string) string {
		t, _ := obj[k].(map[string]any)
		x, _ := t["text"].(string)
		return x
	}
	v.Type, v.CallbackID, v.ExternalID, v.PrivateMetadata = str("type"), str("callback_id"), str("external_id"), str("private_metadata")
	v.Title, v.Submit, v.Close = text("title"), text("submit"), text("close")
	v.NotifyOnClose, _ = obj["notify_on_close"].(bool)
	v.ClearOnClose, _ = obj["clear_on_close"].(bool)
	v.Blocks = nil
	if blocks, ok := obj["blocks"].([]any); ok {
		for _, b := range blocks {
			raw, _ := json.Marshal(b)
			v.Blocks = append(v.Blocks, raw)
		}
	}
	v.Hash = fmt.Sprintf("%d.%s", now.Unix(), randomHex(4))
	v.Errors = nil
	v.JSON, _ = json.Marshal(s.wireViewLocked(v, nil))
}

// wireViewLocked renders a view with its state.
func (s *Server) wireViewLocked(v *view, state map[string]any) map[string]any {
	out := maps.Clone(v.obj)
	if state == nil {
		state = map[string]any{}
	}
	out["id"] = v.ID
	out["team_id"] = s.team.ID
	out["state"] = map[string]any{"values": state}
	out["hash"] = v.Hash
	out["root_view_id"] = v.RootID
	out["previous_view_id"] = nil
	if v.PreviousID != "" {
		out["previous_view_id"] = v.PreviousID
	}
	out["app_id"] = s.bot.AppID
	out["app_installed_team_id"] = s.team.ID
	out["bot_id"] = s.bot.BotID
	for _, k := range []string{"private_metadata", "callback_id", "external_id"} {
		if _, ok := out[k]; !ok {
			out[k] = ""
		}
	}
	for _, k := range []string{"clear_on_close", "notify_on_close"} {
		if _, ok := out[k]; !ok {
			out[k] = false
		}
	}
	return out
}

// openViewLocked opens a view on top of a user's stack.
func (s *Server) openViewLocked(user string, obj map[string]any, now time.Time) *view {
	st := s.stacks[user]
	v := &view{View: View{ID: s.newIDLocked("V"), User: user, Opened: now, Open: true}}
	v.RootID = v.ID
	if len(st) > 0 {
		v.RootID = st[0]
		v.PreviousID = st[len(st)-1]
	}
	s.setViewLocked(v, obj, now)
	s.views[v.ID] = v
	s.vorder = append(s.vorder, v.ID)
	s.stacks[user] = append(st, v.ID)
	return v
}

// closeViewsLocked closes the top n views of a user's stack (all of
// them with n < 0).
func (s *Server) closeViewsLocked(user string, n int, by string, now time.Time) {
	st := s.stacks[user]
	if n < 0 || n > len(st) {
		n = len(st)
	}
	for _, id := range st[len(st)-n:] {
		v := s.views[id]
		v.Open, v.Closed, v.ClosedBy = false, now, by
	}
	if st = st[:len(st)-n]; len(st) == 0 {
		delete(s.stacks, user)
	} else {
		s.stacks[user] = st
	}
}

func (s *Server) viewsOpen(c *call) reply {
	obj, errReply := s.viewArg(c)
	if errReply != nil {
		return errReply
	}
	ext, _ := obj["external_id"].(string)
	if s.externalTakenLocked(ext, "") {
		return fail("duplicate_external_id")
	}
	user, errReply := s.useTriggerLocked(c.str("trigger_id"), c.now)
	if errReply != nil {
		return errReply
	}
	s.closeViewsLocked(user, -1, "replaced", c.now)
	v := s.openViewLocked(user, obj, c.now)
	return okReply("view", json.RawMessage(v.JSON))
}

func (s *Server) viewsPush(c *call) reply {
	obj, errReply := s.viewArg(c)
	if errReply != nil {
		return errReply
	}
	ext, _ := obj["external_id"].(string)
	if s.externalTakenLocked(ext, "") {
		return fail("duplicate_external_id")
	}
	user, errReply := s.useTriggerLocked(c.str("trigger_id"), c.now)
	if errReply != nil {
		return errReply
	}
	switch n := len(s.stacks[user]); {
	case n == 0:
		return fail("not_found")
	case n >= maxViewStack:
		return fail("push_limit_reached")
	}
	v := s.openViewLocked(user, obj, c.now)
	return okReply("view", json.RawMessage(v.JSON))
}

func (s *Server) viewsUpdate(c *call) reply {
	var v *view
	if id := c.str("view_id"); id != "" {
		v = s.views[id]
	} else if ext := c.str("external_id"); ext != "" {
		for _, id := range s.vorder {
			if x := s.views[id]; x.Open && x.ExternalID == ext {
				v = x
			}
		}
	} else {
		return failMessages("invalid_arguments", []problem{{"either view_id or external_id is required", "/view_id"}})
	}
	if v == nil || !v.Open {
		return fail("not_found")
	}
	if h := c.str("hash"); h != "" && h != v.Hash {
		return fail("hash_conflict")
	}
	obj, errReply := s.viewArg(c)
	if errReply != nil {
		return errReply
	}
	if ext, _ := obj["external_id"].(string); s.externalTakenLocked(ext, v.ID) {
		return fail("duplicate_external_id")
	}
	s.setViewLocked(v, obj, c.now)
	v.Updates++
	return okReply("view", json.RawMessage(v.JSON))
}
