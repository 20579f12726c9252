// Package validate is the one semantic validator every component runs: lbctl
// before writing, the scheduler before publishing (I7), the proxy before
// swapping (I5). Structural strictness (unknown fields, duplicate keys, types)
// is api/codec's job; this package checks meaning. Every error names the path
// and the rule, and all errors are reported at once.
package validate

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Error is one broken rule at one path.
type Error struct {
	Path string // e.g. clusters.demo-main.subclusters.SC1.instances[2].port
	Msg  string // e.g. 70000 is outside 1..65535
}

func (e Error) Error() string { return e.Path + ": " + e.Msg }

// Errors is every broken rule of one document, sorted by path.
type Errors []Error

func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// AsErrors extracts the list from an error returned by this package.
func AsErrors(err error) (Errors, bool) {
	var es Errors
	ok := errors.As(err, &es)
	return es, ok
}

// collector accumulates errors while a validator walks a document.
type collector struct{ errs Errors }

func (c *collector) add(path, format string, args ...any) {
	c.errs = append(c.errs, Error{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	sort.SliceStable(c.errs, func(i, j int) bool { return sortKey(c.errs[i].Path) < sortKey(c.errs[j].Path) })
	return c.errs
}

// index is a list index in a path: stages[10].
var index = regexp.MustCompile(`\[([0-9]+)\]`)

// sortKey is path with its list indexes zero-padded, so that errors sort
// by path with stages[2] before stages[10].
func sortKey(path string) string {
	return index.ReplaceAllStringFunc(path, func(m string) string {
		return "[" + strings.Repeat("0", max(0, 20-(len(m)-2))) + m[1:]
	})
}
