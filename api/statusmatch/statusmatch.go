// Package statusmatch parses and evaluates HTTP status expectations used by
// health checks and outlier detection: an exact code ("200"), a class
// ("2xx"), a partial class ("20x", "30x"), a range ("200-299") or any of
// those joined by "|" ("2xx|30x|404").
package statusmatch

import (
	"fmt"
	"strconv"
	"strings"
)

// Matcher is a compiled expectation; the zero value matches nothing.
// It is immutable and safe for concurrent use.
type Matcher struct {
	bits [10]uint64 // bit i of word w: status w*64+i (100..599 fit in 600 bits)
	src  string
}

// Parse compiles expr. Codes must be in 100..599.
func Parse(expr string) (Matcher, error) {
	m := Matcher{src: expr}
	if strings.TrimSpace(expr) == "" {
		return m, fmt.Errorf("status %q is empty; want e.g. 200, 2xx, 2xx|30x or 200-299", expr)
	}
	for _, term := range strings.Split(expr, "|") {
		t := strings.TrimSpace(term)
		lo, hi, err := parseTerm(t)
		if err != nil {
			return Matcher{}, fmt.Errorf("status %q: %w", expr, err)
		}
		for c := lo; c <= hi; c++ {
			m.bits[c/64] |= 1 << (c % 64)
		}
	}
	return m, nil
}

// MustParse is Parse for constants; it panics on error.
func MustParse(expr string) Matcher {
	m, err := Parse(expr)
	if err != nil {
		panic(err)
	}
	return m
}

func parseTerm(t string) (int, int, error) {
	if lo, hi, ok := strings.Cut(t, "-"); ok {
		a, err1 := code(lo)
		b, err2 := code(hi)
		if err1 != nil || err2 != nil || a > b {
			return 0, 0, fmt.Errorf("%q is not a range like 200-299 within 100..599", t)
		}
		return a, b, nil
	}
	if len(t) == 3 && strings.HasSuffix(strings.ToLower(t), "xx") {
		d := t[0]
		if d < '1' || d > '5' {
			return 0, 0, fmt.Errorf("%q is not a class 1xx..5xx", t)
		}
		lo := int(d-'0') * 100
		return lo, lo + 99, nil
	}
	if len(t) == 3 && (t[2] == 'x' || t[2] == 'X') {
		n, err := strconv.Atoi(t[:2])
		if err != nil || n < 10 || n > 59 {
			return 0, 0, fmt.Errorf("%q is not a partial class like 20x", t)
		}
		return n * 10, n*10 + 9, nil
	}
	c, err := code(t)
	if err != nil {
		return 0, 0, err
	}
	return c, c, nil
}

func code(s string) (int, error) {
	c, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || c < 100 || c > 599 {
		return 0, fmt.Errorf("%q is not a status code in 100..599", s)
	}
	return c, nil
}

// Match reports whether status is expected.
func (m Matcher) Match(status int) bool {
	if status < 0 || status >= 640 {
		return false
	}
	return m.bits[status/64]&(1<<(status%64)) != 0
}

// String returns the source expression.
func (m Matcher) String() string { return m.src }
