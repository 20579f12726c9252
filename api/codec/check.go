package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// PathError is a problem with one value of a document.
type PathError struct {
	Path string // e.g. clusters.demo-main.subclusters.SC1.instances[2].port
	Msg  string
}

func (e *PathError) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

// Check walks the JSON document alongside the Go type of v and reports the
// first structural problem with its path: syntax, duplicate keys, unknown
// fields, and values of the wrong type or out of the type's range.
func Check(raw []byte, v any) error { return CheckWith(raw, v, CheckOptions{}) }

// CheckOptions adapt Check to formats that are read more leniently than
// Sluice's own (BFE's files: case-insensitive names, unknown fields ignored).
type CheckOptions struct {
	// FoldCase matches an object key to a struct field case-insensitively
	// when no field has the exact name, as encoding/json does.
	FoldCase bool
	// Unknown is called with the path of a key no struct field matches;
	// returning nil skips the value. Nil: unknown fields are errors.
	Unknown func(path string) error
	// Duplicate words the error for a repeated key; nil: `duplicate key "k"`.
	Duplicate func(key string) string
	// Note is appended to errors about syntax and types, e.g. " (BFE
	// rejects it too)".
	Note string
}

// CheckWith is Check with options.
func CheckWith(raw []byte, v any, o CheckOptions) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	c := checker{d: d, raw: raw, o: o}
	if err := c.value(t, ""); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return &PathError{Msg: "unexpected data after the top-level value" + o.Note}
	}
	return nil
}

type checker struct {
	d     *json.Decoder
	raw   []byte
	o     CheckOptions
	depth int
}

// fail builds a type or syntax error, with the options' note.
func (c *checker) fail(path, format string, args ...any) error {
	return &PathError{Path: path, Msg: fmt.Sprintf(format, args...) + c.o.Note}
}

// maxDepth stops hostile documents nested deeply enough to exhaust the stack.
const maxDepth = 64

var (
	durationName = "Duration"
	timeType     = reflect.TypeOf(time.Time{})
	rawMsgType   = reflect.TypeOf(json.RawMessage{})
)

func (c *checker) token(path string) (json.Token, error) {
	tok, err := c.d.Token()
	if err == nil {
		return tok, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, c.fail(path, "unexpected end of document: the JSON is incomplete")
	}
	off := c.d.InputOffset()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off = se.Offset
	}
	line, col := lineCol(c.raw, off)
	return nil, c.fail(path, "invalid JSON near line %d, column %d: %v", line, col, err)
}

// lineCol turns a byte offset into a 1-based line and column.
func lineCol(raw []byte, off int64) (int, int) {
	off = min(max(off, 0), int64(len(raw)))
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func (c *checker) value(t reflect.Type, path string) error {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxDepth {
		return c.fail(path, "nested deeper than %d levels", maxDepth)
	}
	tok, err := c.token(path)
	if err != nil {
		return err
	}
	return c.valueFrom(tok, t, path)
}

func (c *checker) valueFrom(tok json.Token, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		if tok == nil {
			return nil
		}
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || t == rawMsgType {
		return c.skip(tok, path)
	}
	// Types with a text form: durations and times are strings.
	if t == timeType || (t.Name() == durationName && t.Kind() == reflect.Int64) {
		s, ok := tok.(string)
		if !ok {
			if t == timeType {
				return c.fail(path, "%s is not a time; want an RFC 3339 string", describe(tok))
			}
			return c.fail(path, "%s is not a duration; want a string with a unit, like \"2s\" or \"500ms\"", describe(tok))
		}
		if t != timeType {
			d, err := time.ParseDuration(s)
			if err != nil {
				return c.fail(path, "%q is not a duration; want a number with a unit, like \"2s\"", s)
			}
			if d < 0 {
				return c.fail(path, "%q must not be negative", s)
			}
		} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return c.fail(path, "%q is not an RFC 3339 time", s)
		}
		return nil
	}
	if tok == nil { // JSON null: leaves the zero value, as encoding/json does
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return c.object(tok, path, func(key string) (reflect.Type, error) {
			f, ok := fieldByJSONName(t, key)
			if !ok && c.o.FoldCase {
				f, ok = fieldByFoldedName(t, key)
			}
			if !ok {
				if c.o.Unknown != nil {
					return nil, c.o.Unknown(join(path, key))
				}
				return nil, &PathError{Path: join(path, key), Msg: "unknown field"}
			}
			return f, nil
		})
	case reflect.Map:
		return c.object(tok, path, func(string) (reflect.Type, error) { return t.Elem(), nil })
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			if _, ok := tok.(string); !ok {
				return c.fail(path, "%s is not base64 data", describe(tok))
			}
			return nil
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return c.fail(path, "%s is not a list", describe(tok))
		}
		for i := 0; c.d.More(); i++ {
			if err := c.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := c.token(path)
		return err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return c.fail(path, "%s is not a string", describe(tok))
		}
		return nil
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return c.fail(path, "%s is not true or false", describe(tok))
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return c.fail(path, "%s is not an integer", describe(tok))
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			if isIntegral(n) {
				return c.fail(path, "%s is out of range", n)
			}
			return c.fail(path, "%s is not an integer", n)
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return c.fail(path, "%s is not a non-negative integer", describe(tok))
		}
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			if isIntegral(n) && !strings.HasPrefix(n.String(), "-") {
				return c.fail(path, "%s is out of range", n)
			}
			return c.fail(path, "%s is not a non-negative integer", n)
		}
		return nil
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return c.fail(path, "%s is not a number", describe(tok))
		}
		f, err := strconv.ParseFloat(n.String(), 64)
		if err != nil || math.IsInf(f, 0) || reflect.Zero(t).OverflowFloat(f) {
			return c.fail(path, "%s is out of range", n)
		}
		return nil
	}
	return c.fail(path, "cannot decode into %s", t)
}

func (c *checker) object(tok json.Token, path string, elem func(key string) (reflect.Type, error)) error {
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return c.fail(path, "%s is not an object", describe(tok))
	}
	seen := map[string]bool{}
	for c.d.More() {
		kt, err := c.token(path)
		if err != nil {
			return err
		}
		key, ok := kt.(string)
		if !ok {
			return c.fail(path, "object key is not a string")
		}
		if seen[key] {
			if c.o.Duplicate != nil {
				return &PathError{Path: join(path, key), Msg: c.o.Duplicate(key)}
			}
			return c.fail(path, "duplicate key %q", key)
		}
		seen[key] = true
		et, err := elem(key)
		if err != nil {
			return err
		}
		if err := c.value(et, join(path, key)); err != nil {
			return err
		}
	}
	_, err := c.token(path)
	return err
}

// skip consumes a value of any shape, still rejecting duplicate keys.
func (c *checker) skip(tok json.Token, path string) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		return c.object(tok, path, func(string) (reflect.Type, error) { return nil, nil })
	case '[':
		for i := 0; c.d.More(); i++ {
			if err := c.value(nil, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := c.token(path)
		return err
	}
	return nil
}

func fieldByJSONName(t reflect.Type, key string) (reflect.Type, bool) {
	return fieldMatching(t, func(name string) bool { return name == key })
}

// fieldByFoldedName matches key to a field's JSON name case-insensitively,
// as encoding/json does when no name matches exactly.
func fieldByFoldedName(t reflect.Type, key string) (reflect.Type, bool) {
	return fieldMatching(t, func(name string) bool { return strings.EqualFold(name, key) })
}

// fieldMatching returns the type of the first field (embedded structs
// included) whose JSON name satisfies match.
func fieldMatching(t reflect.Type, match func(name string) bool) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			if ft, ok := fieldMatching(f.Type, match); ok {
				return ft, true
			}
			continue
		}
		// Sluice's own documents match exactly (one spelling per field keeps
		// them greppable); CheckOptions.FoldCase adds encoding/json's folding.
		if match(name) {
			return f.Type, true
		}
	}
	return nil, false
}

func isIntegral(n json.Number) bool {
	return !strings.ContainsAny(n.String(), ".eE")
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return strconv.Quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case json.Delim:
		switch v {
		case '{':
			return "an object"
		case '[':
			return "a list"
		}
	}
	return fmt.Sprint(tok)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
