//go:build e2e

package e2e

import (
	"strings"
	"testing"
)

// Issue 15, item 6: a shift asking for 50 points where IDC1 has 15 moves 15
// and says so (it used to say "done, 50 of 50"); pausing the finished shift
// is refused; an invalid ramp is refused with nothing written.
func TestCappedShiftTellsWhatItMoved(t *testing.T) {
	f, ctx := servingFleet(t)
	if o, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1",
		"SC1=15", "SC2=75", "GSLB_BLACKHOLE=10", "--reason", "e2e capped shift", "--wait", "--wait-timeout", "30s"); err != nil || code != 0 {
		t.Fatalf("weights set --wait: exit %d %v\n%s", code, err, o)
	}

	// Refused before writing: a negative ramp, a step above the percent.
	for _, args := range [][]string{
		{"--percent", "50", "--ramp", "-5s"},
		{"--percent", "5", "--ramp", "1m", "--step", "10"},
	} {
		o, code, err := f.Lbctl(ctx, append([]string{"shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2"}, args...)...)
		if err != nil || code != 1 || !strings.Contains(o, "invalid shift; nothing was written") {
			t.Fatalf("shift %v: exit %d %v\n%s", args, code, err, o)
		}
	}
	if o, code, err := f.Lbctl(ctx, "shift", "list"); err != nil || code != 0 || !strings.Contains(o, "(no shifts)") {
		t.Fatalf("a refused shift was written: exit %d %v\n%s", code, err, o)
	}

	o, code, err := f.Lbctl(ctx, "shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2",
		"--percent", "50", "--reason", "e2e capped", "--wait", "--wait-timeout", "1m")
	t.Logf("shift --wait:\n%s", o)
	if err != nil || code != 0 || !strings.Contains(o, ": done, 15 of 50 points: IDC1 had 15 (v") || !strings.Contains(o, "is live on") {
		t.Fatalf("capped shift --wait: exit %d %v\n%s", code, err, o)
	}
	id := strings.Fields(o[strings.Index(o, "Shift ")+len("Shift "):])[0]
	if o, code, err := f.Lbctl(ctx, "shift", "list"); err != nil || code != 0 || !strings.Contains(o, "15/50") || !strings.Contains(o, "15 of 50 points: IDC1 had 15") {
		t.Fatalf("shift list: exit %d %v\n%s", code, err, o)
	}
	checkShares(t, splitLoad(f, "BFE1", 10000, 400000), "BFE1 shares with the capped shift", map[string]float64{"SC2": 90, "BLACKHOLE": 10})

	o, code, err = f.Lbctl(ctx, "shift", "pause", "--id", id)
	if err != nil || code != 1 || !strings.Contains(o, "is done (15 of 50 points moved): cannot pause it") {
		t.Fatalf("pause of a done shift: exit %d %v\n%s", code, err, o)
	}
}
