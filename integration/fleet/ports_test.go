package fleet

import "testing"

// freePort never repeats a port and stays below the ephemeral range, where
// client connections cannot take it between the probe and the child's bind.
func TestFreePortBelowEphemeralRangeAndUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p := freePort()
		if p < freePortMin || p >= freePortMax {
			t.Fatalf("port %d outside [%d, %d)", p, freePortMin, freePortMax)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
