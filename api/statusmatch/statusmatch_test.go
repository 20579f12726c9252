package statusmatch

import "testing"

func TestMatch(t *testing.T) {
	cases := []struct {
		expr string
		yes  []int
		no   []int
	}{
		{"200", []int{200}, []int{201, 199, 0, 500}},
		{"2xx", []int{200, 250, 299}, []int{300, 199}},
		{"2xx|30x", []int{204, 300, 309}, []int{310, 404}},
		{"2xx|40x", []int{200, 404, 409}, []int{410, 500}},
		{"200-204|500", []int{200, 204, 500}, []int{205, 501}},
		{"5XX", []int{500, 599}, []int{499, 600}},
	}
	for _, c := range cases {
		m, err := Parse(c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		for _, s := range c.yes {
			if !m.Match(s) {
				t.Errorf("%s should match %d", c.expr, s)
			}
		}
		for _, s := range c.no {
			if m.Match(s) {
				t.Errorf("%s should not match %d", c.expr, s)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, e := range []string{"", "1000", "6xx", "abc", "299-200", "2xx|", "99", "0xx"} {
		if _, err := Parse(e); err == nil {
			t.Errorf("%q: want error", e)
		}
	}
}
