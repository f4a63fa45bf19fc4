package config

import (
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	"acpbroker/acp"
	"acpbroker/internal/envvar"
)

// mcp_servers in [agent] or [agents.NAME] is an array of tables. viper
// sees it as one value; the tables are read, and their keys checked, by
// readMCPServers. It is not in defaults: it has no environment form.
const mcpServersField = "mcp_servers"

// mcpSecretsSuffix names, after a section's mcp_servers key, the record
// of the servers' env and header values for reload diffs, which name it
// without showing them (see secretKey).
const mcpSecretsSuffix = ".secrets"

// mcpServerKeys are the keys one mcp_servers table may have.
var mcpServerKeys = []string{"name", "type", "command", "args", "env", "url", "headers"}

// fileOnlyKey reports whether viper's key k belongs to a value that is only
// read from the file, and checked where it is read.
func fileOnlyKey(k string) bool {
	_, field, ok := profileField(k)
	for _, f := range []string{mcpServersField, permissionsField} {
		if ok && (field == f || strings.HasPrefix(field, f+".")) {
			return true
		}
	}
	return false
}

// arrayOfTables reports whether viper's key k belongs to [[schedules]]
// or [[api.tokens]], read from the file's text and checked there.
func arrayOfTables(k string) bool {
	for _, f := range []string{schedulesField, tokensField} {
		if k == f || strings.HasPrefix(k, f+".") {
			return true
		}
	}
	return false
}

// permissionsField in [agent] or [agents.NAME] is the profile's
// permission rules, an array of tables read by policy.Parse.
const permissionsField = "permissions"

// readMCPServers reads the mcp_servers tables of a section of the
// configuration file (section: "agent" or "agents.NAME"; doc: that
// section as go-toml read it). viper lowercases the keys of tables inside
// arrays, which would change environment variable names, so they are
// read from the text itself. Values expand ${VAR} from env as agent.env
// does; a stdio server's command is found where the broker is wired. set
// reports whether the section has the key at all.
func (r *reader) readMCPServers(section string, doc map[string]any, env map[string]string) (servers []acp.MCPServer, set bool) {
	base := section + "." + mcpServersField
	raw := foldGet(doc, mcpServersField)
	if raw == nil {
		return nil, false
	}
	list, ok := raw.([]any)
	if !ok {
		r.fail(base, "must be an array of tables: write a [[%s]] table for each server", base)
		return nil, true
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	var public, secret []string
	used := map[string]string{} // name -> the key of the table that has it
	for i, item := range list {
		key := fmt.Sprintf("%s[%d]", base, i)
		tbl, ok := item.(map[string]any)
		if !ok {
			r.fail(key, "must be a table with at least name and command (stdio) or type and url (http, sse)")
			continue
		}
		t := mcpTable{table: table{r: r, key: key, tbl: map[string]any{}}, lookup: lookup}
		var unknown []string
		for k, v := range tbl {
			if lk := strings.ToLower(k); slices.Contains(mcpServerKeys, lk) {
				t.tbl[lk] = v
			} else {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			r.fail(key, "has unknown key(s): %s (known: %s)", strings.Join(unknown, ", "), strings.Join(mcpServerKeys, ", "))
		}
		s := t.server(used)
		servers = append(servers, s)
		public = append(public, t.describe(s))
		secret = append(secret, fmt.Sprint(s.Env, s.Headers))
	}
	r.vals[base] = "[" + strings.Join(public, "; ") + "]"
	r.vals[base+mcpSecretsSuffix] = strings.Join(secret, "; ")
	return servers, true
}

// foldGet is m's value for key, whose case does not matter (as in viper).
func foldGet(m map[string]any, key string) any {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}

// mcpTable reads one [[agent.mcp_servers]] table, keys in lower case.
// mcpTable is an [[mcp_servers]] table: read as any array table is,
// with the broker's environment to expand its values in.
type mcpTable struct {
	table
	lookup func(string) (string, bool)
}

// expand substitutes the broker's environment in a value of field.
func (t *mcpTable) expand(field, s string) string {
	out, refused := envvar.Expand(s, t.lookup)
	for _, name := range refused {
		t.fail(field, "refers to ${%s}, a broker secret", name)
	}
	return out
}

// pairs reads "NAME=value" entries or a table of strings, names in order.
func (t *mcpTable) pairs(field string, listForm bool) [][2]string {
	v, ok := t.tbl[field]
	if !ok {
		return nil
	}
	var out [][2]string
	switch v := v.(type) {
	case map[string]any:
		for name, val := range v {
			s, ok := val.(string)
			if !ok {
				t.fail(field+"."+name, "must be a string")
			}
			out = append(out, [2]string{name, s})
		}
		sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	case []any:
		if !listForm {
			t.fail(field, "must be a table, e.g. %s = { Authorization = \"Bearer ${TOKEN}\" }", field)
			return nil
		}
		for _, kv := range t.strs(field) {
			name, val, ok := strings.Cut(kv, "=")
			if !ok || name == "" {
				t.fail(field, "entry %q must look like NAME=value", kv)
				continue
			}
			out = append(out, [2]string{name, val})
		}
	default:
		if listForm {
			t.fail(field, "must be a list of \"NAME=value\" entries or a table")
		} else {
			t.fail(field, "must be a table of header names and values")
		}
	}
	return out
}

func (t *mcpTable) server(used map[string]string) acp.MCPServer {
	s := acp.MCPServer{Name: strings.TrimSpace(t.str("name"))}
	switch {
	case s.Name == "":
		t.fail("name", "is required: the name the agent knows the server by")
	case used[s.Name] != "":
		t.fail("name", "= %q is already the name of %s", s.Name, used[s.Name])
	default:
		used[s.Name] = t.key
	}
	switch typ := t.str("type"); typ {
	case "", acp.MCPStdio:
		s.Type = acp.MCPStdio
	case acp.MCPHTTP, acp.MCPSSE:
		s.Type = typ
	default:
		t.fail("type", "= %q must be one of stdio, http, sse", typ)
		return s
	}
	if s.Type == acp.MCPStdio {
		for _, field := range []string{"url", "headers"} {
			if _, ok := t.tbl[field]; ok {
				t.fail(field, "is for http and sse servers; this one is stdio (set type = \"http\" or \"sse\")")
			}
		}
		for _, a := range t.strs("args") {
			s.Args = append(s.Args, t.expand("args", a))
		}
		for _, kv := range t.pairs("env", true) {
			s.Env = append(s.Env, acp.EnvVariable{Name: kv[0], Value: t.expand("env."+kv[0], kv[1])})
		}
		s.Command = t.str("command")
		if s.Command == "" {
			t.fail("command", "is required for a stdio server: the MCP server program the agent starts")
		}
		return s
	}
	for _, field := range []string{"command", "args", "env"} {
		if _, ok := t.tbl[field]; ok {
			t.fail(field, "is for stdio servers; this one is %s", s.Type)
		}
	}
	for _, kv := range t.pairs("headers", false) {
		s.Headers = append(s.Headers, acp.HTTPHeader{Name: kv[0], Value: t.expand("headers."+kv[0], kv[1])})
	}
	rawURL := t.str("url")
	s.URL = t.expand("url", rawURL)
	if rawURL == "" {
		t.fail("url", "is required for an %s server", s.Type)
	} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		t.fail("url", "= %q is not an http(s) URL", rawURL)
	}
	return s
}

// describe is the server as written, for reload diffs: its args and url
// before expansion, and only the names of its env variables and headers.
func (t *mcpTable) describe(s acp.MCPServer) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s type=%s", s.Name, s.Transport())
	if s.Transport() == acp.MCPStdio {
		fmt.Fprintf(&b, " command=%s args=%v", s.Command, t.tbl["args"])
	} else {
		fmt.Fprintf(&b, " url=%v", t.tbl["url"])
	}
	var names []string
	for _, e := range s.Env {
		names = append(names, e.Name)
	}
	for _, h := range s.Headers {
		names = append(names, h.Name)
	}
	if len(names) > 0 {
		fmt.Fprintf(&b, " values for %s", strings.Join(names, ", "))
	}
	return b.String()
}
