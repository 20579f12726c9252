// Package logcheck checks JSON log output in tests.
package logcheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
)

// DuplicateKeys returns a problem for every line of a JSON-lines log that
// is not a JSON object or repeats a top-level key.
func DuplicateKeys(log string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if k, err := duplicateKey(sc.Text()); err != nil {
			out = append(out, fmt.Sprintf("%v: %s", err, sc.Text()))
		} else if k != "" {
			out = append(out, fmt.Sprintf("key %q twice: %s", k, sc.Text()))
		}
	}
	return out
}

func duplicateKey(line string) (string, error) {
	d := json.NewDecoder(strings.NewReader(line))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return "", fmt.Errorf("not a JSON object")
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		k, _ := tok.(string)
		if seen[k] {
			return k, nil
		}
		seen[k] = true
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return "", err
		}
	}
	return "", nil
}
