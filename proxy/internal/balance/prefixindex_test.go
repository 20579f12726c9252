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
		n := 1 + int(rnd()%40)
		if trial%200 == 0 {
			n = 5000
		}
		prefix := make([]int64, n)
		var total int64
		for i := range prefix {
			switch r := rnd() % 10; {
			case r < 2:
			case r < 3 && trial%2 == 1:
				total += 1_000_000 // config.MaxInstanceWeight
			default:
				total += int64(1 + rnd()%7)
			}
			prefix[i] = total
		}
		if total == 0 {
			continue
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
