package freeport

import "testing"

// Port never repeats a port and stays below the ephemeral range, where
// client connections cannot take it between the probe and the later bind.
func TestPortBelowEphemeralRangeAndUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < Min || p >= Max {
			t.Fatalf("port %d outside [%d, %d)", p, Min, Max)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
