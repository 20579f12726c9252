package plan

import (
	"reflect"
	"testing"
)

// TestMaxStepSpreadsFreedWeightBeforeBounding: weight on an entry that is
// no longer available leaves at once and is first given to next's positive
// entries in proportion (B's 50 → A +25, C +25: base A=75, C=25); only then
// is the step bound applied (largest move 25 > 10: α = 0.4 → A=65, C=35).
// Without that spread the base would be A=50, C=0 and the row A=83, C=17.
func TestMaxStepSpreadsFreedWeightBeforeBounding(t *testing.T) {
	prev := map[string]int{"A": 50, "B": 50}
	next := map[string]int{"A": 50, "C": 50}
	out, held := maxStep([]string{"A", "B", "C"}, prev, next, 10, func(k string) bool { return k != "B" })
	if want := map[string]int{"A": 65, "B": 0, "C": 35}; !reflect.DeepEqual(out, want) {
		t.Fatalf("maxStep row = %v, want %v", out, want)
	}
	if want := []string{"A 50→65 (target 50)", "C 0→35 (target 50)"}; !reflect.DeepEqual(held, want) {
		t.Fatalf("held = %q, want %q", held, want)
	}
}
