package validate

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// Errors are listed by path with list indexes in numeric order: a user
// reading stages[2] after stages[10] would think the list was out of order.
func TestErrorsInIndexOrder(t *testing.T) {
	s := loadMission(t)
	stages := make([]config.RolloutStage, 12)
	for i := range stages {
		stages[i] = config.RolloutStage{Count: new(1)}
	}
	for _, i := range []int{11, 2, 10, 1} {
		stages[i] = config.RolloutStage{Count: new(0)}
	}
	s.Rollout = &config.RolloutPolicy{Stages: stages}
	err := State(s)
	es, ok := AsErrors(err)
	if !ok {
		t.Fatalf("State() = %v, want a list of errors", err)
	}
	var got []string
	for _, e := range es {
		if strings.HasPrefix(e.Path, "rollout.stages[") {
			got = append(got, e.Path)
		}
	}
	want := "rollout.stages[1].count rollout.stages[2].count rollout.stages[10].count rollout.stages[11].count"
	if strings.Join(got, " ") != want {
		t.Fatalf("paths in order %q, want %q", got, want)
	}
	for _, c := range []struct{ a, b string }{
		{"x[2]", "x[10]"}, {"x[9].y", "x[10].a"}, {"a[1][2]", "a[1][10]"}, {"a", "a[0]"}, {"a.b", "a[0]"},
	} {
		if !(sortKey(c.a) < sortKey(c.b)) {
			t.Errorf("sortKey(%q) !< sortKey(%q)", c.a, c.b)
		}
	}
}
