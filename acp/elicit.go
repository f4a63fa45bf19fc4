package acp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Elicitation methods, and the request cancellation both sides may send.
const (
	MethodElicitationCreate   = "elicitation/create"
	MethodElicitationComplete = "elicitation/complete"
	MethodCancelRequest       = "$/cancel_request"
)

// Elicitation modes.
const (
	ElicitForm = "form"
	ElicitURL  = "url"
)

// Elicitation actions: what the person did with the question.
const (
	ActionAccept  = "accept"
	ActionDecline = "decline"
	ActionCancel  = "cancel"
)

// ElicitationCapabilities says which elicitation modes the client serves;
// a mode counts when its key is present.
type ElicitationCapabilities struct {
	Form *struct{} `json:"form,omitempty"`
	URL  *struct{} `json:"url,omitempty"`
}

// ElicitationRequest is the params of elicitation/create: a question the
// agent puts to the person, as a form to fill in or a URL to visit.
type ElicitationRequest struct {
	// SessionID (and ToolCallID, when set) scope the question to a
	// session; RequestID, to one of our requests in flight instead.
	SessionID  string          `json:"sessionId,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	RequestID  json.RawMessage `json:"requestId,omitempty"`
	Mode       string          `json:"mode"`
	Message    string          `json:"message"`
	// Schema is the form (mode "form").
	Schema *ElicitationSchema `json:"requestedSchema,omitempty"`
	// URL and ElicitationID are set in mode "url". URL is shown, never
	// fetched.
	URL           string `json:"url,omitempty"`
	ElicitationID string `json:"elicitationId,omitempty"`
}

// validate checks what the Conn needs to serve the request at all.
func (r *ElicitationRequest) validate() error {
	switch r.Mode {
	case ElicitForm:
		if r.Schema == nil {
			return fmt.Errorf("%w: a form question needs a requestedSchema", ErrInvalidParams)
		}
	case ElicitURL:
		if r.URL == "" || r.ElicitationID == "" {
			return fmt.Errorf("%w: a url question needs a url and an elicitationId", ErrInvalidParams)
		}
	default:
		return fmt.Errorf("%w: elicitation mode %q is not supported", ErrInvalidParams, r.Mode)
	}
	return nil
}

// ElicitationSchema is a form: flat fields, in the order the agent wrote
// them.
type ElicitationSchema struct {
	Type        string
	Title       string
	Description string
	Fields      []ElicitationField
}

// FieldKind is how a form field is asked.
type FieldKind int

// Field kinds. FieldUnsupported is any schema this client cannot ask for:
// nested objects, arrays of anything but a string choice, unknown types.
const (
	FieldUnsupported FieldKind = iota
	FieldText
	FieldNumber
	FieldInteger
	FieldBoolean
	FieldSelect      // one of Options
	FieldMultiSelect // any of Options
)

// ElicitationField is one property of a form.
type ElicitationField struct {
	Key         string
	Kind        FieldKind
	Type        string // the JSON schema type as sent
	Title       string
	Description string
	Required    bool
	// Options are the choices of a select or multi-select.
	Options []ElicitationOption
	// String bounds and format (email, uri, date, date-time).
	MinLength, MaxLength *int
	Pattern, Format      string
	// Number bounds.
	Minimum, Maximum *float64
	// Multi-select bounds.
	MinItems, MaxItems *int
	// Default is the agent's suggestion, as decoded JSON (nil: none).
	Default any

	pos int // the field's place in the form, from 0
}

// ElicitationOption is one choice of a select field.
type ElicitationOption struct {
	Value string
	Title string
}

// Label names the field for people: its title, else its key, else
// (both blank) "field N", N its place in the form.
func (f *ElicitationField) Label() string {
	switch {
	case strings.TrimSpace(f.Title) != "":
		return f.Title
	case strings.TrimSpace(f.Key) != "":
		return f.Key
	}
	return "field " + strconv.Itoa(f.pos+1)
}

// Label names the option for people: its title, else its value, else
// (both blank) "(empty)".
func (o ElicitationOption) Label() string {
	switch {
	case strings.TrimSpace(o.Title) != "":
		return o.Title
	case strings.TrimSpace(o.Value) != "":
		return o.Value
	}
	return "(empty)"
}

// UnmarshalJSON reads the schema keeping the order of its properties.
func (s *ElicitationSchema) UnmarshalJSON(b []byte) error {
	var top struct {
		Type        string          `json:"type"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		Properties  json.RawMessage `json:"properties"`
		Required    []string        `json:"required"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return err
	}
	*s = ElicitationSchema{Type: top.Type, Title: top.Title, Description: top.Description}
	if len(top.Properties) == 0 || string(top.Properties) == "null" {
		return nil
	}
	required := make(map[string]bool, len(top.Required))
	for _, k := range top.Required {
		required[k] = true
	}
	dec := json.NewDecoder(bytes.NewReader(top.Properties))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errors.New("requestedSchema.properties is not an object")
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if len(s.Fields) == maxFormFields {
			return fmt.Errorf("requestedSchema has more than %d fields", maxFormFields)
		}
		f := parseField(key, raw)
		f.Required = required[key]
		f.pos = len(s.Fields)
		s.Fields = append(s.Fields, f)
	}
	return nil
}

// maxFormFields bounds a form's fields: no person fills in more, and an
// agent's endless form costs nothing past it.
const maxFormFields = 64

type rawOption struct {
	Const *string `json:"const"`
	Title string  `json:"title"`
}

type rawProp struct {
	Type        json.RawMessage `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Enum        []any           `json:"enum"`
	EnumNames   []string        `json:"enumNames"`
	OneOf       []rawOption     `json:"oneOf"`
	AnyOf       []rawOption     `json:"anyOf"`
	MinLength   *int            `json:"minLength"`
	MaxLength   *int            `json:"maxLength"`
	Pattern     string          `json:"pattern"`
	Format      string          `json:"format"`
	Minimum     *float64        `json:"minimum"`
	Maximum     *float64        `json:"maximum"`
	MinItems    *int            `json:"minItems"`
	MaxItems    *int            `json:"maxItems"`
	Items       *rawProp        `json:"items"`
	Properties  json.RawMessage `json:"properties"`
	Default     any             `json:"default"`
}

func parseField(key string, raw json.RawMessage) ElicitationField {
	f := ElicitationField{Key: key}
	var p rawProp
	if json.Unmarshal(raw, &p) != nil {
		f.Type = "invalid"
		return f
	}
	_ = json.Unmarshal(p.Type, &f.Type) // a list of types stays unsupported
	if f.Type == "" {
		f.Type = strings.TrimSpace(string(p.Type))
	}
	f.Title, f.Description, f.Default = p.Title, p.Description, p.Default
	f.MinLength, f.MaxLength, f.Pattern, f.Format = p.MinLength, p.MaxLength, p.Pattern, p.Format
	f.Minimum, f.Maximum, f.MinItems, f.MaxItems = p.Minimum, p.Maximum, p.MinItems, p.MaxItems
	if len(p.Properties) > 0 {
		return f // nested: unsupported
	}
	switch f.Type {
	case "string":
		switch {
		case p.Enum != nil || p.OneOf != nil:
			if opts, ok := options(p.Enum, p.EnumNames, p.OneOf); ok {
				f.Kind, f.Options = FieldSelect, opts
			}
		default:
			f.Kind = FieldText
		}
	case "number":
		f.Kind = FieldNumber
	case "integer":
		f.Kind = FieldInteger
	case "boolean":
		f.Kind = FieldBoolean
	case "array":
		it := p.Items
		if it == nil {
			return f
		}
		var itemType string
		_ = json.Unmarshal(it.Type, &itemType)
		if itemType != "" && itemType != "string" {
			return f
		}
		consts := it.AnyOf
		if consts == nil {
			consts = it.OneOf
		}
		if (it.Enum == nil) == (consts == nil) {
			return f
		}
		if opts, ok := options(it.Enum, it.EnumNames, consts); ok {
			f.Kind, f.Options = FieldMultiSelect, opts
		}
	}
	return f
}

// options reads the choices of a select: an enum of strings (with
// optional enumNames) or oneOf/anyOf consts. None, or one that is not a
// string, makes the field unsupported.
func options(enum []any, names []string, consts []rawOption) ([]ElicitationOption, bool) {
	var out []ElicitationOption
	for i, v := range enum {
		s, ok := v.(string)
		if !ok {
			return nil, false
		}
		o := ElicitationOption{Value: s}
		if i < len(names) {
			o.Title = names[i]
		}
		out = append(out, o)
	}
	for _, c := range consts {
		if c.Const == nil {
			return nil, false
		}
		out = append(out, ElicitationOption{Value: *c.Const, Title: c.Title})
	}
	return out, len(out) > 0
}

// Unsupported returns the fields this client cannot ask for, and an
// error when the form as a whole is not one (not an object). A form with
// any of them is declined as a whole: part of a form is not an answer,
// and a required field that cannot be asked cannot be filled.
func (r *ElicitationRequest) Unsupported() ([]ElicitationField, error) {
	if r.Mode != ElicitForm || r.Schema == nil {
		return nil, nil
	}
	if r.Schema.Type != "" && r.Schema.Type != "object" {
		return nil, fmt.Errorf("the form's schema is of type %q, not an object", r.Schema.Type)
	}
	var bad []ElicitationField
	for _, f := range r.Schema.Fields {
		if f.Kind == FieldUnsupported {
			bad = append(bad, f)
		}
	}
	return bad, nil
}

// Field returns the form field with key, or nil.
func (r *ElicitationRequest) Field(key string) *ElicitationField {
	if r.Schema == nil {
		return nil
	}
	for i := range r.Schema.Fields {
		if r.Schema.Fields[i].Key == key {
			return &r.Schema.Fields[i]
		}
	}
	return nil
}

// ElicitationResult is the answer to elicitation/create. Content goes
// with "accept" on a form only: a value per answered field, a string,
// float64, int64, bool or []string as the field's kind says.
type ElicitationResult struct {
	Action  string
	Content map[string]any
}

// MarshalJSON writes the wire form {"action":…, "content":{…}}.
func (r ElicitationResult) MarshalJSON() ([]byte, error) {
	out := struct {
		Action  string         `json:"action"`
		Content map[string]any `json:"content,omitempty"`
	}{Action: r.Action}
	if r.Action == ActionAccept && len(r.Content) > 0 {
		out.Content = r.Content
	}
	return json.Marshal(out)
}

// Check reports whether content is a whole, valid answer to the form:
// every required field present, every value of its field's kind and
// within its bounds, no field the form does not have.
func (r *ElicitationRequest) Check(content map[string]any) error {
	if r.Mode != ElicitForm || r.Schema == nil {
		if len(content) > 0 {
			return errors.New("a url question's answer carries no content")
		}
		return nil
	}
	var missing []string
	for i := range r.Schema.Fields {
		f := &r.Schema.Fields[i]
		v, ok := content[f.Key]
		if !ok {
			if f.Required {
				missing = append(missing, f.Label())
			}
			continue
		}
		if err := f.Check(v); err != nil {
			return fmt.Errorf("%s: %w", f.Label(), err)
		}
	}
	for k := range content {
		if r.Field(k) == nil {
			return fmt.Errorf("the form has no field %q", k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("required: %s", strings.Join(missing, ", "))
	}
	return nil
}

// Check reports whether v is a valid value for the field.
func (f *ElicitationField) Check(v any) error {
	switch f.Kind {
	case FieldText:
		s, ok := v.(string)
		if !ok {
			return errors.New("not text")
		}
		n := utf8.RuneCountInString(s)
		if f.MinLength != nil && n < *f.MinLength {
			return fmt.Errorf("at least %d characters", *f.MinLength)
		}
		if f.MaxLength != nil && n > *f.MaxLength {
			return fmt.Errorf("at most %d characters", *f.MaxLength)
		}
		if f.Pattern != "" {
			// A pattern Go cannot compile is left to the agent to check.
			if re, err := regexp.Compile(f.Pattern); err == nil && !re.MatchString(s) {
				return fmt.Errorf("does not match %s", f.Pattern)
			}
		}
		return checkFormat(f.Format, s)
	case FieldNumber, FieldInteger:
		var x float64
		switch n := v.(type) {
		case float64:
			x = n
		case int64:
			x = float64(n)
		case int:
			x = float64(n)
		default:
			return errors.New("not a number")
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("not a number")
		}
		if f.Kind == FieldInteger && x != math.Trunc(x) {
			return errors.New("not a whole number")
		}
		if f.Minimum != nil && x < *f.Minimum {
			return fmt.Errorf("at least %s", fmtNum(*f.Minimum))
		}
		if f.Maximum != nil && x > *f.Maximum {
			return fmt.Errorf("at most %s", fmtNum(*f.Maximum))
		}
	case FieldBoolean:
		if _, ok := v.(bool); !ok {
			return errors.New("not yes or no")
		}
	case FieldSelect:
		s, ok := v.(string)
		if !ok || !f.hasOption(s) {
			return errors.New("not one of the choices")
		}
	case FieldMultiSelect:
		list, ok := v.([]string)
		if !ok {
			return errors.New("not a list of choices")
		}
		for _, s := range list {
			if !f.hasOption(s) {
				return fmt.Errorf("%q is not one of the choices", s)
			}
		}
		if f.MinItems != nil && len(list) < *f.MinItems {
			return fmt.Errorf("at least %d choices", *f.MinItems)
		}
		if f.MaxItems != nil && len(list) > *f.MaxItems {
			return fmt.Errorf("at most %d choices", *f.MaxItems)
		}
	default:
		return errors.New("this kind of field cannot be answered")
	}
	return nil
}

func checkFormat(format, s string) error {
	var err error
	switch format {
	case "email":
		_, err = mail.ParseAddress(s)
	case "uri":
		var u *url.URL
		if u, err = url.Parse(s); err == nil && !u.IsAbs() {
			err = errors.New("not absolute")
		}
	case "date":
		_, err = time.Parse(time.DateOnly, s)
	case "date-time":
		_, err = time.Parse(time.RFC3339, s)
	}
	if err != nil {
		return fmt.Errorf("not a valid %s", format)
	}
	return nil
}

func (f *ElicitationField) hasOption(v string) bool {
	return slices.ContainsFunc(f.Options, func(o ElicitationOption) bool { return o.Value == v })
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// Parse reads a typed answer for the field: a number for number and
// integer fields; yes/no (y/n, true/false) for booleans; a choice's
// number (from 1), value or title for a select, several separated by
// commas for a multi-select; text as it is. The value is checked.
func (f *ElicitationField) Parse(text string) (any, error) {
	text = strings.TrimSpace(text)
	var v any
	switch f.Kind {
	case FieldText:
		v = text
	case FieldNumber, FieldInteger:
		x, err := strconv.ParseFloat(strings.ReplaceAll(text, "_", ""), 64)
		if err != nil {
			if f.Kind == FieldInteger {
				return nil, errors.New("not a whole number")
			}
			return nil, errors.New("not a number")
		}
		v = x
		if f.Kind == FieldInteger && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			v = int64(x)
		}
	case FieldBoolean:
		switch strings.ToLower(text) {
		case "y", "yes", "true":
			v = true
		case "n", "no", "false":
			v = false
		default:
			return nil, errors.New("answer yes or no")
		}
	case FieldSelect:
		o, ok := f.choice(text)
		if !ok {
			return nil, errors.New("not one of the choices")
		}
		v = o
	case FieldMultiSelect:
		list := []string{}
		for _, part := range strings.Split(text, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			o, ok := f.choice(part)
			if !ok {
				return nil, fmt.Errorf("%q is not one of the choices", strings.TrimSpace(part))
			}
			if !slices.Contains(list, o) {
				list = append(list, o)
			}
		}
		v = list
	default:
		return nil, errors.New("this kind of field cannot be answered")
	}
	if err := f.Check(v); err != nil {
		return nil, err
	}
	return v, nil
}

func (f *ElicitationField) choice(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= len(f.Options) {
		return f.Options[n-1].Value, true
	}
	for _, o := range f.Options {
		if o.Value == s || strings.EqualFold(o.Title, s) {
			return o.Value, true
		}
	}
	return "", false
}

// DefaultValue is the field's default as a value of its kind, when the
// agent gave a valid one.
func (f *ElicitationField) DefaultValue() (any, bool) {
	var v any
	switch d := f.Default.(type) {
	case nil:
		return nil, false
	case float64:
		v = d
		if f.Kind == FieldInteger && d == math.Trunc(d) && math.Abs(d) < 1<<53 {
			v = int64(d)
		}
	case []any:
		list := []string{}
		for _, e := range d {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			list = append(list, s)
		}
		v = list
	default:
		v = d
	}
	if f.Check(v) != nil {
		return nil, false
	}
	return v, true
}
