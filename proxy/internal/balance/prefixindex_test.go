package balance

import (
	"sort"
	"testing"
)

// The prefix index gives map-based hashing exactly the binary search's
// member — the first whose prefix sum exceeds x — over random weights
// (zeros for unavailable members, the largest weight next to weight-1
// members), for every x of small totals and for x on, next to and between
// the prefix sums of large ones.
func TestPrefixIndexMatchesBinarySearch(t *testing.T) {
	rnd := seededRand(3)
	for trial := range 2000 {
		ws, total := randomWeights(rnd, trial, 40, 200, trial%2 == 1)
		n := len(ws)
		prefix := make([]int64, n)
		var sum int64
		for i, w := range ws {
			sum += int64(w)
			prefix[i] = sum
		}
		p := newPrefixIndex(prefix, total)
		var xs []int64
		if total <= 400 {
			for x := range total {
				xs = append(xs, x)
			}
		}
		for _, s := range prefix {
			xs = append(xs, max(0, s-1), min(total-1, s))
		}
		for range 200 {
			xs = append(xs, int64(rnd()%uint64(total)))
		}
		for _, x := range xs {
			want := sort.Search(n, func(i int) bool { return prefix[i] > x })
			if got := p.find(prefix, x); got != want {
				t.Fatalf("trial %d (n=%d, total %d, shift %d): find(%d) = %d, want %d", trial, n, total, p.shift, x, got, want)
			}
		}
		if len(p.start) > n+2 {
			t.Fatalf("trial %d: %d buckets for %d members", trial, len(p.start), n)
		}
	}
}
