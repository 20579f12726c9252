//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Issue 15, item 7: max_step_percent (10, the default) bounds how far a
// computed row moves per step_interval (1 s in the dev fleet), not per
// publish. Draining SC1 moves BFE2's computed row off it at once (the safe
// direction); after the undrain the row walks back at most 10 points per
// interval — every version of the way is in etcd to check — and traffic
// through BFE2 ends on the row it started from.
func TestMaxStepIsPacedInTime(t *testing.T) {
	f, ctx := servingFleet(t)
	// BFE2's row computed with every instance registered: the row to return to.
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	sc1 := func(v uint64) (int, time.Time) {
		s, err := f.Snapshot(ctx, "BFE2", v)
		if err != nil {
			t.Fatal(err)
		}
		r := s.Clusters["demo-main"].Row
		return r.Weights["SC1"] * 100 / r.Denominator, s.Meta.CreatedAt
	}
	ptr, err := f.Current(ctx, "BFE2")
	if err != nil {
		t.Fatal(err)
	}
	start, _ := sc1(ptr.Version)
	t.Logf("BFE2's demo-main row gives SC1 %d%% (v%d)", start, ptr.Version)
	if start < 30 {
		t.Fatalf("BFE2's row gives SC1 only %d%%: too little to see pacing", start)
	}
	if o, code, err := f.Lbctl(ctx, "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "e2e pace", "--wait"); err != nil || code != 0 {
		t.Fatalf("drain SC1 --wait: exit %d %v\n%s", code, err, o)
	}
	drained, err := f.Current(ctx, "BFE2")
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := sc1(drained.Version); w != 0 {
		t.Fatalf("SC1 drained, yet BFE2 v%d gives it %d%%: the safe direction is not at once", drained.Version, w)
	}
	o, code, err := f.Lbctl(ctx, "undrain", "--cluster", "demo-main", "--subcluster", "SC1")
	if err != nil || code != 0 {
		t.Fatalf("undrain: exit %d %v\n%s", code, err, o)
	}
	var last uint64
	eventually(t, 60*time.Second, "BFE2's row back on SC1", func() error {
		p, err := f.Current(ctx, "BFE2")
		if err != nil {
			return err
		}
		last = p.Version
		if w, _ := sc1(p.Version); w != start {
			return fmt.Errorf("v%d gives SC1 %d%%, want %d", p.Version, w, start)
		}
		return nil
	})
	// Every version on the way: ≤ 10 points per move, moves ≥ 1 s apart.
	var trail []string
	prevW, prevAt := sc1(drained.Version)
	moves := 0
	for v := drained.Version + 1; v <= last; v++ {
		w, at := sc1(v)
		trail = append(trail, fmt.Sprintf("v%d SC1=%d at +%v", v, w, at.Sub(prevAt).Round(time.Millisecond)))
		if w == prevW {
			continue
		}
		moves++
		if d := w - prevW; d > 10 || d < -10 {
			t.Errorf("v%d moved SC1 %d → %d: more than max_step_percent 10", v, prevW, w)
		}
		if gap := at.Sub(prevAt); moves > 1 && gap < 950*time.Millisecond {
			t.Errorf("v%d moved %v after the previous move: faster than step_interval 1s", v, gap)
		}
		prevW, prevAt = w, at
	}
	t.Logf("the way back: %s", strings.Join(trail, "; "))
	if min := (start + 9) / 10; moves < min {
		t.Errorf("%d moves for %d points: want at least %d", moves, start, min)
	}
	checkShares(t, splitLoad(f, "BFE2", 10000, 700000), "BFE2 shares once paced back", map[string]float64{"SC1": float64(start), "SC2": float64(100 - start)})
}
