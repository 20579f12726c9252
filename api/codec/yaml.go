package codec

import (
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

// checkYAMLScalars rejects plain scalars whose meaning depends on the YAML
// version, with their line and column, so that "port: 010" is an error
// rather than port 8.
func checkYAMLScalars(raw []byte) error {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(raw, &doc); err != nil {
		return err // already "yaml: line N: ..."
	}
	return walkYAML(&doc, 0)
}

func walkYAML(n *yamlv3.Node, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("yaml: line %d: nested deeper than %d levels", n.Line, maxDepth)
	}
	if n.Kind == yamlv3.ScalarNode && n.Style == 0 && ambiguousNumber.MatchString(n.Value) {
		return fmt.Errorf("yaml: line %d column %d: %s is ambiguous (YAML 1.1 reads it as a non-decimal number); write a plain decimal number, or quote it if it is a string",
			n.Line, n.Column, n.Value)
	}
	if n.Kind == yamlv3.ScalarNode && n.Style == 0 && n.ShortTag() == "!!float" {
		// The converter writes 1.0 and 1e3 as the JSON integers 1 and 1000,
		// which would slip past the integer check that rejects them in JSON.
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) && !math.IsInf(f, 0) {
			return fmt.Errorf("yaml: line %d column %d: %s is written as a fraction or with an exponent; write a plain integer (%s) or quote it if it is a string",
				n.Line, n.Column, n.Value, strconv.FormatFloat(f, 'f', -1, 64))
		}
	}
	if n.Kind == yamlv3.AliasNode {
		return nil // the anchored node is checked where it is defined
	}
	for _, c := range n.Content {
		if err := walkYAML(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}
