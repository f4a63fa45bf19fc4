package fakeagent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sessions a new process can reach are kept as files under
// <cwd>/.fakeagent (or Options.SessionsDir, with <sid>.cwd naming the
// session's cwd): <sid> holds its prompts, one a line; <sid>.title its
// title (the "title" prompt); "closed" lists the sessions closed with
// session/close, one a line. session/load replays the prompts;
// session/resume takes the session up without replaying; session/fork
// copies its prompts and title to a new session, which must be found
// under the cwd the fork names (a copied workspace carries them);
// session/list lists the sessions under the cwd asked for (or under
// every cwd this process knows), the newest first.

// kept reports whether the agent offers a session method that reads the
// session files.
func (a *agent) kept() bool {
	o := a.opts
	return o.LoadSession || o.ListSessions || o.ResumeSession || o.ForkSession
}

// sessionCapabilities is initialize's sessionCapabilities.
func (a *agent) sessionCapabilities() map[string]any {
	caps := map[string]any{}
	for name, on := range map[string]bool{"list": a.opts.ListSessions, "resume": a.opts.ResumeSession, "close": a.opts.CloseSession, "fork": a.opts.ForkSession} {
		if on {
			caps[name] = map[string]any{}
		}
	}
	return caps
}

// newSessionIDLocked names a new session; a.mu must be held. The
// process's start tells its sessions from those of an earlier process
// with the same pid (in a sandbox, every agent is pid 2).
func (a *agent) newSessionIDLocked() string {
	a.sessions++
	if a.born == "" {
		a.born = strconv.FormatInt(time.Now().UnixNano()%(36*36*36*36*36*36), 36)
	}
	return fmt.Sprintf("sess-%d-%s-%d", a.opts.PID, a.born, a.sessions)
}

// setHowLocked records how this process came to have sid: "new",
// "loaded", "resumed" or "forked from P". a.mu must be held.
func (a *agent) setHowLocked(sid, how string) {
	if a.how == nil {
		a.how = map[string]string{}
	}
	a.how[sid] = how
}

// sessionMethod serves session/list, session/resume, session/close and
// session/fork, each only when offered.
func (a *agent) sessionMethod(m message) {
	offered := map[string]bool{"session/list": a.opts.ListSessions, "session/resume": a.opts.ResumeSession,
		"session/close": a.opts.CloseSession, "session/fork": a.opts.ForkSession}
	if !offered[m.Method] {
		a.replyErr(m.ID, -32601, "method not found: "+m.Method)
		return
	}
	var p struct {
		SessionID  string          `json:"sessionId"`
		Cwd        string          `json:"cwd"`
		Cursor     string          `json:"cursor"`
		MCPServers json.RawMessage `json:"mcpServers"`
	}
	json.Unmarshal(m.Params, &p)
	a.logf("got %s %s", m.Method, p.SessionID)
	switch m.Method {
	case "session/list":
		a.listSessions(m, p.Cwd, p.Cursor)
	case "session/resume":
		if _, err := os.Stat(a.historyPath(p.Cwd, p.SessionID)); err != nil || !filepath.IsAbs(p.Cwd) {
			a.replyErr(m.ID, -32002, "session not found: "+p.SessionID)
			return
		}
		a.mu.Lock()
		a.remember(p.SessionID, p.Cwd, p.MCPServers)
		a.setHowLocked(p.SessionID, "resumed")
		a.mu.Unlock()
		a.reply(m.ID, a.setup(p.SessionID, map[string]any{}))
		if a.opts.Commands {
			a.commands(p.SessionID)
		}
	case "session/close":
		a.mu.Lock()
		cwd, known := a.cwds[p.SessionID]
		if ch, ok := a.cancels[p.SessionID]; ok {
			close(ch) // closing a session cancels its turn
			delete(a.cancels, p.SessionID)
		}
		delete(a.cwds, p.SessionID)
		delete(a.mcp, p.SessionID)
		delete(a.how, p.SessionID)
		a.mu.Unlock()
		if !known {
			a.replyErr(m.ID, -32002, "session not found: "+p.SessionID)
			return
		}
		a.appendLine(filepath.Join(a.sessionsDir(cwd), "closed"), p.SessionID)
		a.reply(m.ID, map[string]any{})
	case "session/fork":
		a.forkSession(m, p.SessionID, p.Cwd, p.MCPServers)
	}
}

// forkSession serves session/fork: a new session with the prompts and
// title of parent, found under cwd.
func (a *agent) forkSession(m message, parent, cwd string, mcp json.RawMessage) {
	history, err := os.ReadFile(a.historyPath(cwd, parent))
	if err != nil || !filepath.IsAbs(cwd) {
		a.replyErr(m.ID, -32002, "session not found: "+parent)
		return
	}
	a.mu.Lock()
	sid := a.newSessionIDLocked()
	a.remember(sid, cwd, mcp)
	a.setHowLocked(sid, "forked from "+parent)
	a.mu.Unlock()
	err = os.WriteFile(a.historyPath(cwd, sid), history, 0o644)
	if err == nil && a.opts.SessionsDir != "" {
		err = os.WriteFile(a.historyPath(cwd, sid)+".cwd", []byte(cwd), 0o644)
	}
	if err != nil {
		a.replyErr(m.ID, -32603, "fork: "+err.Error())
		return
	}
	if title, err := os.ReadFile(a.historyPath(cwd, parent) + ".title"); err == nil {
		os.WriteFile(a.historyPath(cwd, sid)+".title", title, 0o644)
	}
	a.commands(sid)
	a.reply(m.ID, a.setup(sid, map[string]any{"sessionId": sid}))
}

// listSessions serves session/list: the sessions under cwd, or under
// every cwd this process knows, the newest first, ListPage a page.
func (a *agent) listSessions(m message, cwd, cursor string) {
	var dirs []string
	if cwd != "" {
		dirs = []string{cwd}
	} else {
		a.mu.Lock()
		for _, d := range a.cwds {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
		a.mu.Unlock()
	}
	type entry struct {
		info map[string]any
		at   time.Time
	}
	var all []entry
	for _, dir := range dirs {
		kept := a.sessionsDir(dir)
		files, _ := os.ReadDir(kept)
		for _, f := range files {
			if f.IsDir() || strings.Contains(f.Name(), ".") || f.Name() == "closed" {
				continue
			}
			if where, err := os.ReadFile(filepath.Join(kept, f.Name()+".cwd")); err == nil && string(where) != dir {
				continue // another cwd's, kept in SessionsDir
			}
			fi, err := f.Info()
			if err != nil {
				continue
			}
			info := map[string]any{"sessionId": f.Name(), "cwd": dir, "updatedAt": fi.ModTime().UTC().Format(time.RFC3339Nano)}
			if title, err := os.ReadFile(filepath.Join(kept, f.Name()+".title")); err == nil {
				info["title"] = string(title)
			}
			all = append(all, entry{info, fi.ModTime()})
		}
	}
	slices.SortStableFunc(all, func(x, y entry) int { return y.at.Compare(x.at) })
	from := 0
	fmt.Sscanf(cursor, "page-%d", &from)
	from = min(max(from, 0), len(all))
	to := len(all)
	if n := a.opts.ListPage; n > 0 {
		to = min(from+n, len(all))
	}
	sessions := []any{}
	for _, e := range all[from:to] {
		sessions = append(sessions, e.info)
	}
	res := map[string]any{"sessions": sessions}
	if to < len(all) {
		res["nextCursor"] = fmt.Sprintf("page-%d", to)
	}
	a.reply(m.ID, res)
}

// saveTitle keeps the session's title beside its prompts.
func (a *agent) saveTitle(sid, title string) {
	a.mu.Lock()
	cwd := a.cwds[sid]
	a.mu.Unlock()
	if cwd != "" && a.kept() {
		if err := os.WriteFile(a.historyPath(cwd, sid)+".title", []byte(title), 0o644); err != nil {
			a.logf("title: %v", err)
		}
	}
}

// appendLine appends a line to a file, made if need be.
func (a *agent) appendLine(path, line string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		a.logf("%s: %v", path, err)
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		a.logf("%s: %v", path, err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// sessionScript runs the "session" prompt: it answers "session SID
// (HOW); N earlier prompts" and, when there are some, "; last: TEXT",
// the prompt before this one. It reports whether cmd was it.
func (a *agent) sessionScript(t *turn, cmd string) bool {
	if cmd != "session" {
		return false
	}
	a.mu.Lock()
	how, cwd := a.how[t.sid], a.cwds[t.sid]
	a.mu.Unlock()
	if how == "" {
		how = "new"
	}
	var earlier []string
	if b, err := os.ReadFile(a.historyPath(cwd, t.sid)); err == nil {
		for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
			if l != "" {
				earlier = append(earlier, l)
			}
		}
	}
	if n := len(earlier); n > 0 && earlier[n-1] == "session" {
		earlier = earlier[:n-1] // this prompt
	}
	text := fmt.Sprintf("session %s (%s); %d earlier prompts", t.sid, how, len(earlier))
	if n := len(earlier); n > 0 {
		text += "; last: " + earlier[n-1]
	}
	a.chunk(t.sid, text)
	t.stop("end_turn")
	return true
}
