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
func Check(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	c := checker{d: d}
	if err := c.value(t, ""); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return &PathError{Msg: "unexpected data after the top-level value"}
	}
	return nil
}

type checker struct {
	d     *json.Decoder
	depth int
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
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &PathError{Path: path, Msg: "unexpected end of document"}
		}
		return nil, &PathError{Path: path, Msg: "invalid JSON: " + err.Error()}
	}
	return tok, nil
}

func (c *checker) value(t reflect.Type, path string) error {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxDepth {
		return &PathError{Path: path, Msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
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
				return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a time; want an RFC 3339 string", describe(tok))}
			}
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a duration; want a string with a unit, like \"2s\" or \"500ms\"", describe(tok))}
		}
		if t != timeType {
			d, err := time.ParseDuration(s)
			if err != nil {
				return &PathError{Path: path, Msg: fmt.Sprintf("%q is not a duration; want a number with a unit, like \"2s\"", s)}
			}
			if d < 0 {
				return &PathError{Path: path, Msg: fmt.Sprintf("%q must not be negative", s)}
			}
		} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			return &PathError{Path: path, Msg: fmt.Sprintf("%q is not an RFC 3339 time", s)}
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
			if !ok {
				return nil, &PathError{Path: join(path, key), Msg: "unknown field"}
			}
			return f, nil
		})
	case reflect.Map:
		return c.object(tok, path, func(string) (reflect.Type, error) { return t.Elem(), nil })
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			if _, ok := tok.(string); !ok {
				return &PathError{Path: path, Msg: fmt.Sprintf("%s is not base64 data", describe(tok))}
			}
			return nil
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a list", describe(tok))}
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
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a string", describe(tok))}
		}
		return nil
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not true or false", describe(tok))}
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not an integer", describe(tok))}
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowInt(i) {
			if isIntegral(n) {
				return &PathError{Path: path, Msg: fmt.Sprintf("%s is out of range", n)}
			}
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not an integer", n)}
		}
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a non-negative integer", describe(tok))}
		}
		u, err := strconv.ParseUint(n.String(), 10, 64)
		if err != nil || reflect.Zero(t).OverflowUint(u) {
			if isIntegral(n) && !strings.HasPrefix(n.String(), "-") {
				return &PathError{Path: path, Msg: fmt.Sprintf("%s is out of range", n)}
			}
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a non-negative integer", n)}
		}
		return nil
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is not a number", describe(tok))}
		}
		f, err := strconv.ParseFloat(n.String(), 64)
		if err != nil || math.IsInf(f, 0) || reflect.Zero(t).OverflowFloat(f) {
			return &PathError{Path: path, Msg: fmt.Sprintf("%s is out of range", n)}
		}
		return nil
	}
	return &PathError{Path: path, Msg: fmt.Sprintf("cannot decode into %s", t)}
}

func (c *checker) object(tok json.Token, path string, elem func(key string) (reflect.Type, error)) error {
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &PathError{Path: path, Msg: fmt.Sprintf("%s is not an object", describe(tok))}
	}
	seen := map[string]bool{}
	for c.d.More() {
		kt, err := c.token(path)
		if err != nil {
			return err
		}
		key, ok := kt.(string)
		if !ok {
			return &PathError{Path: path, Msg: "object key is not a string"}
		}
		if seen[key] {
			return &PathError{Path: path, Msg: fmt.Sprintf("duplicate key %q", key)}
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
			if ft, ok := fieldByJSONName(f.Type, key); ok {
				return ft, true
			}
			continue
		}
		// encoding/json matches names case-insensitively; we do not: one
		// spelling per field keeps documents greppable.
		if name == key {
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
