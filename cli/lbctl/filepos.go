package lbctl

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/validate"
)

// Errors about a file the user gave name the file, the line and the path
// inside the document: "demo.yaml:9: clusters.demo-main.subclusters: key
// "SC1" is given twice (first at line 6)". Lines come from a YAML parse of
// the file (JSON is YAML), so they are only as good as the file's syntax:
// a file that does not parse keeps the parser's own message.

// inFile words err, returned while decoding or validating raw read from
// name, with file positions.
func inFile(name string, raw []byte, err error) error {
	var doc yamlv3.Node
	if yamlv3.Unmarshal(raw, &doc) != nil || len(doc.Content) == 0 {
		return fmt.Errorf("%s: %w", name, err)
	}
	root := doc.Content[0]
	if dups := duplicateKeys(root, ""); len(dups) > 0 {
		for i := range dups {
			dups[i] = name + ":" + dups[i]
		}
		return errors.New(strings.Join(dups, "\n"))
	}
	if es, ok := validate.AsErrors(err); ok {
		lines := make([]string, len(es))
		for i, e := range es {
			lines[i] = at(name, root, e.Path) + e.Error()
		}
		return errors.New(strings.Join(lines, "\n"))
	}
	var pe *codec.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		return fmt.Errorf("%s%w", at(name, root, pe.Path), err)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// at returns "name:LINE: " for the node at path, or "name: " when the path
// is not in the document (a missing field is reported at its parent).
func at(name string, root *yamlv3.Node, path string) string {
	if line := lineOf(root, path); line > 0 {
		return fmt.Sprintf("%s:%d: ", name, line)
	}
	return name + ": "
}

// duplicateKeys lists every key given twice in one mapping, with its line
// and path.
func duplicateKeys(n *yamlv3.Node, path string) []string {
	var out []string
	switch n.Kind {
	case yamlv3.MappingNode:
		first := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			where := path
			if where == "" {
				where = "(top level)"
			}
			if l, dup := first[k.Value]; dup {
				out = append(out, fmt.Sprintf("%d: %s: key %q is given twice (first at line %d)", k.Line, where, k.Value, l))
				continue
			}
			first[k.Value] = k.Line
			out = append(out, duplicateKeys(v, join(path, k.Value))...)
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			out = append(out, duplicateKeys(c, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// lineOf finds the line of the value at a validator path such as
// clusters.demo-main.subclusters.SC1.instances[2].port. Keys may contain
// dots: at each mapping the longest key that matches is taken. It returns
// the line of the deepest node found when the path goes further than the
// document (a missing field), 0 when nothing matched.
func lineOf(n *yamlv3.Node, path string) int {
	line := 0
	for path != "" && n != nil {
		switch {
		case n.Kind == yamlv3.DocumentNode && len(n.Content) > 0:
			n = n.Content[0]
			continue
		case n.Kind == yamlv3.AliasNode:
			n = n.Alias
			continue
		case strings.HasPrefix(path, "["):
			end := strings.IndexByte(path, ']')
			i, err := strconv.Atoi(path[1:max(end, 1)])
			if end < 0 || err != nil || n.Kind != yamlv3.SequenceNode || i >= len(n.Content) {
				return line
			}
			n, path = n.Content[i], strings.TrimPrefix(path[end+1:], ".")
			line = n.Line
		case n.Kind == yamlv3.MappingNode:
			var best *yamlv3.Node
			bestLen := -1
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if len(k) > bestLen && strings.HasPrefix(path, k) && (len(path) == len(k) || path[len(k)] == '.' || path[len(k)] == '[') {
					best, bestLen = n.Content[i+1], len(k)
					line = n.Content[i].Line
				}
			}
			if best == nil {
				return line
			}
			n, path = best, strings.TrimPrefix(path[bestLen:], ".")
		default:
			return line
		}
	}
	if n != nil && line == 0 {
		line = n.Line
	}
	return line
}
