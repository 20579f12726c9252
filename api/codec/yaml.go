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
	var floats []yamlFloat
	return floats, walkYAML(&doc, 0, "", &floats)
}

func walkYAML(n *yamlv3.Node, depth int, path string, floats *[]yamlFloat) error {
	if depth > maxDepth {
		return fmt.Errorf("yaml: line %d: nested deeper than %d levels", n.Line, maxDepth)
	}
	switch n.Kind {
	case yamlv3.ScalarNode:
		if n.Style == 0 && ambiguousNumber.MatchString(n.Value) {
			return fmt.Errorf("yaml: line %d column %d: %s is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string",
				n.Line, n.Column, n.Value)
		}
		noteFloat(n, path, floats)
	case yamlv3.AliasNode:
		// The anchored node is checked where it is defined; an integral
		// float used through an alias is noted here too (an alias of a
		// mapping or a list is not followed: its floats read as integers).
		if n.Alias != nil && n.Alias.Kind == yamlv3.ScalarNode {
			noteFloat(n.Alias, path, floats)
		}
	case yamlv3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if err := walkYAML(k, depth+1, "", nil); err != nil {
				return err
			}
			sub := path + pathSep + k.Value
			if k.ShortTag() == "!!merge" {
				sub = path // merged keys land in this mapping
			}
			if err := walkYAML(v, depth+1, sub, floats); err != nil {
				return err
			}
		}
	default: // documents and lists
		for i, c := range n.Content {
			sub := path
			if n.Kind == yamlv3.SequenceNode {
				sub = path + pathSep + "[" + strconv.Itoa(i) + "]"
			}
			if err := walkYAML(c, depth+1, sub, floats); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteFloat adds n to floats when it is a plain float scalar with an
// integral value. Its JSON literal is the one written when JSON reads it as
// a number (1.0, 1e3, -2.0), else the value with ".0" (+1.0 → 1.0).
func noteFloat(n *yamlv3.Node, path string, floats *[]yamlFloat) {
	if floats == nil || n.Style != 0 || n.ShortTag() != "!!float" {
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
	*floats = append(*floats, yamlFloat{path: path, lit: lit})
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
