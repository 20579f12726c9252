package balance

// prefixIndex finds in O(1) where a value x in [0, total) falls in a
// view's prefix sums — the first member whose prefix sum exceeds x, the
// member map-based hashing maps x to — where a binary search reads log₂ n
// entries scattered over the array. Bucket b covers [b<<shift,
// (b+1)<<shift) and holds the answer for its first value; about one
// member's prefix sum falls in each bucket, and the answer for x lies
// between its bucket's and the next bucket's, found there by a binary
// search of that (short) range: exactly the full search's answer.
type prefixIndex struct {
	start []int32 // start[b]: the first member whose prefix sum exceeds b<<shift
	shift uint
}

func newPrefixIndex(prefix []int64, total int64) prefixIndex {
	var p prefixIndex
	for total>>p.shift > int64(len(prefix)) {
		p.shift++
	}
	p.start = make([]int32, total>>p.shift+2)
	i := 0
	for b := range p.start {
		for i < len(prefix) && prefix[i] <= int64(b)<<p.shift {
			i++
		}
		p.start[b] = int32(i)
	}
	return p
}

// find is the first i with prefix[i] > x (0 ≤ x < total). The range is
// usually one or two members long: it is halved only while longer than
// four, then walked, without sort.Search's closure (39 of the 64
// instructions a map-based pick spent finding its member, in callgrind).
func (p *prefixIndex) find(prefix []int64, x int64) int {
	b := x >> p.shift
	lo, hi := int(p.start[b]), int(p.start[b+1])
	for hi-lo > 4 {
		// The answer is in [lo, hi]: the first of the range above x, else hi.
		if m := int(uint(lo+hi) >> 1); prefix[m] > x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	for lo < hi && prefix[lo] <= x {
		lo++
	}
	return lo
}
