package balance

import (
	"math"
	"sort"
	"testing"
)

// The ring's bucket index finds exactly the binary search's start — the
// first point with hash ≥ h — for rings of every size (empty, one point,
// a few, the largest) and for keys on, next to and between the points and
// at both ends of the circle.
func TestRingIndexMatchesBinarySearch(t *testing.T) {
	rnd := seededRand(5)
	sizes := []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 31, 100, 1000, 4097, 50_000}
	for _, n := range sizes {
		r := buildRing(ringMembers(instances(n), ones(n)))
		if n > 0 && len(r.index) < 2 {
			t.Fatalf("n=%d: index %d buckets", n, len(r.index))
		}
		hs := []uint32{0, 1, math.MaxUint32 - 1, math.MaxUint32}
		for _, p := range r.points[:min(len(r.points), 3000)] {
			hs = append(hs, p.hash-1, p.hash, p.hash+1)
		}
		for range 3000 {
			hs = append(hs, uint32(rnd()))
		}
		for _, h := range hs {
			want := sort.Search(len(r.points), func(i int) bool { return r.points[i].hash >= h })
			if got := r.start(h); got != want {
				t.Fatalf("n=%d (%d points, %d index bits): start(%#x) = %d, want %d", n, len(r.points), r.indexBits, h, got, want)
			}
		}
		// Buckets hold about ringBucketPoints points each.
		if b := len(r.index) - 1; len(r.points) > 0 && len(r.points)/b > 2*ringBucketPoints {
			t.Fatalf("n=%d: %d points in %d buckets", n, len(r.points), b)
		}
	}
}
