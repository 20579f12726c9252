package bfe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// FileError is a problem with one value of one BFE file.
type FileError struct {
	File string // the file as given to the loader
	Path string // e.g. Config.p1.CheckConf.StatusCode; empty for the whole file
	Msg  string
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return e.File + ": " + e.Msg
	}
	return e.File + ": " + e.Path + ": " + e.Msg
}

// decodeFile checks raw against the Go type of v the way BFE's decoder reads
// it (field names match case-insensitively, unknown fields are ignored), but
// stricter where BFE is silently lossy: a duplicate key is an error (BFE keeps
// the last value). Wrong types and syntax errors are errors, as in BFE. Unknown
// fields become warnings. On success raw is decoded into v.
func decodeFile(file string, raw []byte, v any) ([]string, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	w := walker{d: d, file: file, raw: raw}
	if err := w.value(reflect.TypeOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, &FileError{File: file, Msg: "unexpected data after the top-level value (BFE rejects it too)"}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, &FileError{File: file, Msg: err.Error()}
	}
	return w.warnings, nil
}

type walker struct {
	d        *json.Decoder
	file     string
	raw      []byte
	depth    int
	warnings []string
}

const maxDepth = 64

var rawMessageType = reflect.TypeOf(json.RawMessage{})

func (w *walker) fail(path, format string, args ...any) error {
	return &FileError{File: w.file, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (w *walker) token(path string) (json.Token, error) {
	tok, err := w.d.Token()
	if err == nil {
		return tok, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, w.fail(path, "unexpected end of file: the JSON is incomplete (BFE rejects it too)")
	}
	line, col := lineCol(w.raw, w.d.InputOffset())
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col = lineCol(w.raw, se.Offset)
	}
	return nil, w.fail(path, "invalid JSON near line %d, column %d: %v (BFE rejects it too)", line, col, err)
}

func lineCol(raw []byte, off int64) (int, int) {
	if off > int64(len(raw)) {
		off = int64(len(raw))
	}
	before := raw[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func (w *walker) value(t reflect.Type, path string) error {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > maxDepth {
		return w.fail(path, "nested deeper than %d levels", maxDepth)
	}
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	return w.valueFrom(tok, t, path)
}

func (w *walker) valueFrom(tok json.Token, t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || t == rawMessageType {
		return w.skip(tok, path)
	}
	if tok == nil { // null leaves the field unset, as in BFE
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		return w.object(tok, path, func(key string) (reflect.Type, bool) { return fieldType(t, key) })
	case reflect.Map:
		return w.object(tok, path, func(string) (reflect.Type, bool) { return t.Elem(), true })
	case reflect.Slice:
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return w.fail(path, "%s is not a list (BFE rejects it too)", describe(tok))
		}
		for i := 0; w.d.More(); i++ {
			if err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := w.token(path)
		return err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return w.fail(path, "%s is not a string (BFE rejects it too)", describe(tok))
		}
		return nil
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return w.fail(path, "%s is not true or false (BFE rejects it too)", describe(tok))
		}
		return nil
	case reflect.Int, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			return w.fail(path, "%s is not an integer (BFE rejects it too)", describe(tok))
		}
		if _, err := strconv.ParseInt(n.String(), 10, 64); err != nil {
			return w.fail(path, "%s is not an integer in range (BFE rejects it too)", n)
		}
		return nil
	}
	return w.fail(path, "cannot decode into %s", t)
}

func (w *walker) object(tok json.Token, path string, elem func(key string) (reflect.Type, bool)) error {
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return w.fail(path, "%s is not an object (BFE rejects it too)", describe(tok))
	}
	seen := map[string]bool{}
	for w.d.More() {
		kt, err := w.token(path)
		if err != nil {
			return err
		}
		key := kt.(string)
		if seen[key] {
			return w.fail(join(path, key), "duplicate key %q: BFE silently keeps the last value; Sluice is stricter and rejects the file", key)
		}
		seen[key] = true
		et, known := elem(key)
		if !known {
			w.warnings = append(w.warnings, fmt.Sprintf("%s: %s: unknown field ignored (BFE ignores it too)", w.file, join(path, key)))
		}
		if err := w.value(et, join(path, key)); err != nil {
			return err
		}
	}
	_, err := w.token(path)
	return err
}

func (w *walker) skip(tok json.Token, path string) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	if d == '{' {
		return w.object(tok, path, func(string) (reflect.Type, bool) { return nil, true })
	}
	for i := 0; w.d.More(); i++ {
		if err := w.value(nil, fmt.Sprintf("%s[%d]", path, i)); err != nil {
			return err
		}
	}
	_, err := w.token(path)
	return err
}

// fieldType matches a key to a struct field as encoding/json (and BFE's
// decoder) does: exact name first, then case-insensitively.
func fieldType(t reflect.Type, key string) (reflect.Type, bool) {
	var fold reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Name == key {
			return f.Type, true
		}
		if fold == nil && strings.EqualFold(f.Name, key) {
			fold = f.Type
		}
	}
	return fold, fold != nil
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
