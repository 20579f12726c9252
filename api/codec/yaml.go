package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"

	yamlv3 "go.yaml.in/yaml/v3"
)

// ambiguousNumber matches plain YAML scalars that YAML 1.1 (the dialect
// the converter speaks) reads as numbers a reader would not expect: octal
// "010" (= 8), hex "0x10", "0o10", binary "0b10", digit separators "1_000",
// sexagesimal "1:30" (= 90), and the floats .inf and .nan.
var ambiguousNumber = regexp.MustCompile(`^[-+]?(0[0-9_]+|0[xXoObB][0-9a-fA-F_]*|[0-9][0-9_]*_[0-9_]*|\.(inf|Inf|INF)|\.(nan|NaN|NAN))$`)

// A YAML float written with an integral value (1.0, 50.0, 1e3) reaches the
// JSON the converter writes as an integer (1, 50, 1000), so an integer field
// would take it silently, while a float field (a factor, a percent) must.
// checkYAMLScalars notes where such floats are, by the path the converter's
// JSON puts them at, and keepFloats writes them back into that JSON as they
// were written: a float field reads 1.0 as 1, an integer field refuses it
// with its path ("…port: 80.0 is not an integer") as it refuses 80.5.

// yamlFloat is an integral float scalar: its path (keys and [i] indexes,
// joined by pathSep) and its JSON literal.
type yamlFloat struct{ path, lit string }

// pathSep joins the parts of a yamlFloat path: a byte no YAML key the
// documents use holds.
const pathSep = "\x00"

// checkYAMLScalars rejects plain scalars whose meaning depends on the YAML
// version, with their line and column, so that "port: 010" is an error
// rather than port 8, and returns the integral floats (see yamlFloat).
func checkYAMLScalars(raw []byte) ([]yamlFloat, error) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(raw, &doc); err != nil {
		return nil, err // already "yaml: line N: ..."
	}
	w := yamlWalk{budget: aliasBudget(len(raw))}
	if err := w.walk(&doc, 0, ""); err != nil {
		return nil, err
	}
	return w.floats, nil
}

// aliasBudget is how many nodes a walk may visit in all, aliases followed:
// enough for any document that uses aliases to share settings, and a
// bound on one that nests them to expand exponentially ("billion
// laughs"), which the converter refuses too.
func aliasBudget(size int) int { return 64*size + 10_000 }

// yamlWalk checks every scalar of a document and notes its integral
// floats, following aliases (of scalars, mappings and lists) and merge
// keys where the converter expands them, so a float reaches the JSON where
// the converter puts it.
type yamlWalk struct {
	floats []yamlFloat
	budget int // nodes still to visit
}

func (w *yamlWalk) walk(n *yamlv3.Node, depth int, path string) error {
	if depth > maxDepth {
		return fmt.Errorf("yaml: line %d: nested deeper than %d levels", n.Line, maxDepth)
	}
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("yaml: line %d: the document's aliases expand to too many nodes", n.Line)
	}
	switch n.Kind {
	case yamlv3.ScalarNode:
		if n.Style == 0 && ambiguousNumber.MatchString(n.Value) {
			return fmt.Errorf("yaml: line %d column %d: %s is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string",
				n.Line, n.Column, n.Value)
		}
		w.noteFloat(n, path)
	case yamlv3.AliasNode:
		if n.Alias != nil {
			return w.walk(n.Alias, depth+1, path)
		}
	case yamlv3.MappingNode:
		return w.mapping(n, depth, path)
	default: // documents and lists
		for i, c := range n.Content {
			sub := path
			if n.Kind == yamlv3.SequenceNode {
				sub = path + pathSep + "[" + strconv.Itoa(i) + "]"
			}
			if err := w.walk(c, depth+1, sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// mapping walks the fields of mapping n at path, then those its merge keys
// bring in (<<: *a, or <<: [*a, *b]). A merged key that n or an earlier
// merge sets too is not overridden: the converter refuses it as a
// duplicate.
func (w *yamlWalk) mapping(n *yamlv3.Node, depth int, path string) error {
	var merges []*yamlv3.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := w.walk(k, depth+1, ""); err != nil {
			return err
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if err := w.walk(v, depth+1, path+pathSep+k.Value); err != nil {
			return err
		}
	}
	for _, m := range merges {
		srcs := []*yamlv3.Node{m}
		if m.Kind == yamlv3.SequenceNode {
			srcs = m.Content
		}
		for _, src := range srcs {
			for src.Kind == yamlv3.AliasNode && src.Alias != nil {
				src = src.Alias
			}
			if src.Kind != yamlv3.MappingNode {
				continue // the converter refuses it
			}
			if err := w.mapping(src, depth+1, path); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteFloat adds n to floats when it is a plain float scalar with an
// integral value. Its JSON literal is the one written when JSON reads it as
// a number (1.0, 1e3, -2.0), else the value with ".0" (+1.0 → 1.0).
func (w *yamlWalk) noteFloat(n *yamlv3.Node, path string) {
	if n.Style != 0 || n.ShortTag() != "!!float" {
		return
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
		return
	}
	lit := n.Value
	if !jsonNumber.MatchString(lit) {
		lit = strconv.FormatFloat(f, 'f', -1, 64) + ".0"
	}
	w.floats = append(w.floats, yamlFloat{path: path, lit: lit})
}

// jsonNumber is JSON's number grammar.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

// keepFloats writes the integral floats back into j, the converter's JSON of
// the same document, as they were written (see yamlFloat).
func keepFloats(j []byte, floats []yamlFloat) ([]byte, error) {
	if len(floats) == 0 {
		return j, nil
	}
	want := make(map[string]string, len(floats))
	for _, f := range floats {
		want[f.path] = f.lit
	}
	type edit struct {
		start, end int64
		lit        string
	}
	var edits []edit
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' {
				for d.More() {
					k, err := d.Token()
					if err != nil {
						return err
					}
					key, _ := k.(string)
					if err := walk(path + pathSep + key); err != nil {
						return err
					}
				}
			} else {
				for i := 0; d.More(); i++ {
					if err := walk(path + pathSep + "[" + strconv.Itoa(i) + "]"); err != nil {
						return err
					}
				}
			}
			_, err = d.Token() // the closing delimiter
			return err
		case json.Number:
			if lit, ok := want[path]; ok {
				end := d.InputOffset()
				edits = append(edits, edit{end - int64(len(t)), end, lit})
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(j)+8*len(edits))
	var at int64
	for _, e := range edits {
		out = append(out, j[at:e.start]...)
		out = append(out, e.lit...)
		at = e.end
	}
	return append(out, j[at:]...), nil
}
