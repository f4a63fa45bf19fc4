package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// openapiDoc is as much of the OpenAPI document as the test reads.
type openapiDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

// The OpenAPI document is the API as served: every route the Server
// serves is in it with its method, and no other; each body the API reads
// or writes has a schema whose properties are the type's JSON fields,
// and whose required fields the type always writes.
func TestOpenAPI_TheDocumentIsTheAPI(t *testing.T) {
	var doc openapiDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	var served, documented []string
	for _, rt := range routes {
		served = append(served, strings.ToLower(rt.method)+" "+rt.path)
	}
	for path, ops := range doc.Paths {
		for op := range ops {
			if op != "parameters" {
				documented = append(documented, op+" "+path)
			}
		}
	}
	sort.Strings(served)
	sort.Strings(documented)
	if !slices.Equal(served, documented) {
		t.Errorf("served:\n%s\ndocumented:\n%s", strings.Join(served, "\n"), strings.Join(documented, "\n"))
	}
	for name, typ := range map[string]any{
		"StartRequest": StartRequest{}, "Attachment": Attachment{}, "StartResponse": StartResponse{}, "PromptView": PromptView{},
		"PermissionAsked": PermissionAsked{}, "ToolCall": toolCall{}, "PermissionOption": permissionOption{},
		"PermissionRequest": PermissionRequest{}, "PermissionAnswered": PermissionAnswered{}, "CancelResponse": CancelResponse{},
		"End": End{}, "Error": Error{},
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var fields, always []string
		rt := reflect.TypeOf(typ)
		for i := range rt.NumField() {
			tag := rt.Field(i).Tag.Get("json")
			field, opts, _ := strings.Cut(tag, ",")
			if field == "" || field == "-" {
				continue
			}
			fields = append(fields, field)
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
				always = append(always, field)
			}
		}
		var props []string
		for p := range schema.Properties {
			props = append(props, p)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: the type has %v, the schema %v", name, fields, props)
		}
		for _, r := range schema.Required {
			if !slices.Contains(always, r) && !strings.HasSuffix(name, "Request") && name != "Attachment" {
				t.Errorf("%s: %s is required by the schema but may be left out", name, r)
			}
		}
	}
}

// FuzzStartRequest reads arbitrary bodies as POST /v1/prompts does:
// each is a request with text or attachments and at most one place, or
// a refusal with a status of 400 or 413 and a message, never a panic.
func FuzzStartRequest(f *testing.F) {
	for _, s := range []string{
		`{"channel":"1","text":"hi"}`,
		`{"thread":"1","text":"hi","attachments":[{"name":"a.txt","content":"x"}]}`,
		`{"channel":"1","thread":"2","text":"hi"}`,
		`{"text":5}`, `{"colour":"red"}`, `[]`, `null`, `{"text":"a"}{"text":"b"}`,
		`{"channel":"1","text":"","attachments":[{"name":"../x","content":"y"}]}`,
		`{"channel":"1","text":"hi","agent":"x","attachments":[` + strings.Repeat(`{"name":"a","content":"b"},`, 11) + `{"name":"a","content":"b"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, bad := decodeStart(body, 100)
		if bad != nil {
			if (bad.status != 400 && bad.status != 413) || bad.msg == "" {
				t.Fatalf("refused with %d %q", bad.status, bad.msg)
			}
			return
		}
		if strings.TrimSpace(req.Text) == "" && len(req.Attachments) == 0 {
			t.Fatalf("accepted with nothing to ask: %+v", req)
		}
		if req.Channel != "" && req.Thread != "" {
			t.Fatalf("accepted with two places: %+v", req)
		}
		if len(req.Attachments) > maxAttachments {
			t.Fatalf("accepted %d attachments", len(req.Attachments))
		}
		for _, a := range req.Attachments {
			if len(a.Content) > 100 || strings.TrimSpace(a.Name) == "" {
				t.Fatalf("accepted attachment %+v", a)
			}
		}
		if len(req.blocks()) == 0 {
			t.Fatalf("accepted with no block for the agent: %+v", req)
		}
	})
}
