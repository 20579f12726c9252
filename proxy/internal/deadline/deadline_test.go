package deadline

import (
	"testing"
	"time"
)

func TestSkip(t *testing.T) {
	now := time.Now()
	in := func(d time.Duration) time.Time { return now.Add(d) }
	cases := []struct {
		name        string
		armed, want time.Time
		skip        bool
	}{
		{"same", in(time.Minute), in(time.Minute), true},
		{"both zero", time.Time{}, time.Time{}, true},
		{"a little later", in(60 * time.Second), in(61 * time.Second), true},
		{"much later", in(60 * time.Second), in(70 * time.Second), false},
		{"earlier", in(60 * time.Second), in(59 * time.Second), false},
		{"clear", in(60 * time.Second), time.Time{}, false},
		{"arm", time.Time{}, in(60 * time.Second), false},
		{"armed one expired", in(-time.Second), in(time.Millisecond), false},
		{"short timeout, small move", in(100 * time.Millisecond), in(110 * time.Millisecond), false},
	}
	for _, c := range cases {
		if got := Skip(c.armed, c.want); got != c.skip {
			t.Errorf("%s: Skip = %v, want %v", c.name, got, c.skip)
		}
	}
}
