package balance

import (
	"math/bits"
	"sync/atomic"
)

// maxScheduleLen caps a precomputed smooth-WRR cycle. Larger weight sums are
// scaled down (proportions kept within rounding, every weight ≥ 1).
const maxScheduleLen = 1 << 16

// schedule is one full cycle of nginx's smooth WRR over fixed weights,
// precomputed so a pick is one atomic add and one slice read (lock-free, as
// gRPC-Go's edfScheduler). In every window of len(order) consecutive picks
// of one cursor, member i appears exactly weights[i] times (D3) — for the
// scaled weights when the sum exceeded maxScheduleLen.
//
// A schedule has one cursor per stripe (see Cluster.Start), each on its own
// cache line, so picks running on different cores do not fight over one
// counter — the way nginx and Envoy keep one smooth-WRR state per worker.
// Cursor k starts k/stripes of the way into the cycle so that stripes do not
// move in lockstep.
type schedule struct {
	order   []int32 // member index per position
	sig     uint64  // signature of (member, weight) list it was built from
	recip   uint64  // ⌊(2⁶⁴-1) / len(order)⌋: cursor mod len without a division
	cursors []cursor
}

// cursor is one stripe's position, padded to a cache line.
type cursor struct {
	n atomic.Uint64
	_ [56]byte
}

func newSchedule(order []int32, sig uint64, stripes int) *schedule {
	s := &schedule{order: order, sig: sig, cursors: make([]cursor, stripes)}
	if len(order) > 0 {
		s.recip = ^uint64(0) / uint64(len(order))
	}
	for k := range s.cursors {
		s.cursors[k].n.Store(uint64(k * len(order) / stripes))
	}
	return s
}

// next advances stripe's cursor (stripe < len(cursors)) and returns its member.
func (s *schedule) next(stripe uint32) int32 {
	return s.order[s.pos(s.cursors[stripe].n.Add(1)-1)]
}

// nextPos advances stripe's cursor and returns its position in the cycle.
func (s *schedule) nextPos(stripe uint32) uint64 {
	return s.pos(s.cursors[stripe].n.Add(1) - 1)
}

// peek is the member stripe's cursor would return next, without advancing it.
func (s *schedule) peek(stripe uint32, k int) int32 {
	return s.order[s.pos(s.cursors[stripe].n.Load()+uint64(k))]
}

// pos is n mod len(order). A 64-bit division costs tens of cycles, as much
// as the rest of the pick: the quotient from the precomputed reciprocal is
// exact or one short, so one conditional subtraction finishes it.
func (s *schedule) pos(n uint64) uint64 {
	l := uint64(len(s.order))
	q, _ := bits.Mul64(n, s.recip)
	r := n - q*l
	if r >= l {
		r -= l
	}
	return r
}

// scaleWeights keeps Σw ≤ limit (and ≥ 1 for every positive weight).
func scaleWeights(w []int, limit int) []int {
	g, sum := 0, 0
	for _, x := range w {
		g = gcd(g, x)
		sum += x
	}
	out := make([]int, len(w))
	if g == 0 {
		return out
	}
	for i, x := range w {
		out[i] = x / g
	}
	sum /= g
	if sum <= limit {
		return out
	}
	budget := max(limit, len(w))
	for i, x := range out {
		if x > 0 {
			out[i] = max(1, int(int64(x)*int64(budget)/int64(sum)))
		}
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// buildSchedule computes one cycle of smooth WRR (nginx: add each weight to
// its current, pick the largest — ties to the earlier member — subtract the
// total from the winner). Weights must be ≥ 0; zero-weight members never
// appear. Members of equal weight are picked round-robin in list order, so a
// step costs O(distinct weights) rather than O(members): building 10 000
// members stays in milliseconds.
func buildSchedule(weights []int) []int32 {
	w := scaleWeights(weights, maxScheduleLen)
	total := 0
	for _, x := range w {
		total += x
	}
	if total == 0 {
		return nil
	}
	// Group members by weight; each group is a round robin in index order.
	type group struct {
		w       int64
		members []int32
		next    int   // position of the member with the fewest picks
		k       int64 // picks of that member (members before next have k+1)
	}
	byW := map[int]*group{}
	var groups []*group
	for i, x := range w {
		if x <= 0 {
			continue
		}
		g := byW[x]
		if g == nil {
			g = &group{w: int64(x)}
			byW[x] = g
			groups = append(groups, g)
		}
		g.members = append(g.members, int32(i))
	}
	T := int64(total)
	order := make([]int32, 0, total)
	for t := int64(1); t <= T; t++ {
		// current of a group's candidate after adding weights at step t.
		var best *group
		var bestV int64
		var bestIdx int32
		for _, g := range groups {
			v := t*g.w - T*g.k
			idx := g.members[g.next]
			if best == nil || v > bestV || (v == bestV && idx < bestIdx) {
				best, bestV, bestIdx = g, v, idx
			}
		}
		order = append(order, bestIdx)
		best.next++
		if best.next == len(best.members) {
			best.next = 0
			best.k++
		}
	}
	return order
}
