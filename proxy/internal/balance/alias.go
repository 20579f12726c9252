package balance

import "math/bits"

// aliasTable is Vose's alias method over a view's weights: a weighted
// random draw in O(1) — one column drawn uniformly, then that column's
// member or its alias — where a binary search of the prefix sums reads
// log₂ n entries scattered over the array. Built once per view, for the
// algorithms that draw (random, random(N), p2c-ewma).
//
// It is exact in integers: the weights are scaled by the column count, so
// column c holds cut of its own member and total−cut of alias, and member
// i's mass over all columns is exactly weights[i] × columns (a draw is then
// weights[i] / total likely, as by the prefix sums; members of weight 0
// have no mass).
type aliasTable []aliasCol

type aliasCol struct {
	cut   int64 // a draw y in [0, total) below cut takes the column's own member
	alias int32
}

// newAlias builds the table of ws (total = Σ ws > 0).
func newAlias(ws []int, total int64) aliasTable {
	n := len(ws)
	t := make(aliasTable, n)
	scaled := make([]int64, n)
	small, large := make([]int32, 0, n), make([]int32, 0, n)
	for i, w := range ws {
		scaled[i] = int64(w) * int64(n)
		if scaled[i] < total {
			small = append(small, int32(i))
		} else {
			large = append(large, int32(i))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		t[s] = aliasCol{cut: scaled[s], alias: l}
		if scaled[l] -= total - scaled[s]; scaled[l] < total {
			large = large[:len(large)-1]
			small = append(small, l)
		}
	}
	// What is left holds exactly total (the sums balance in integers).
	for _, i := range append(small, large...) {
		t[i] = aliasCol{cut: total, alias: i}
	}
	return t
}

// draw maps one random word to a member: the high word of r × columns is
// the column, the low word a uniform fraction that, scaled by total,
// decides between the column's member and its alias.
func (t aliasTable) draw(r uint64, total int64) int {
	c, frac := bits.Mul64(r, uint64(len(t)))
	y, _ := bits.Mul64(frac, uint64(total))
	if col := t[c]; int64(y) >= col.cut {
		return int(col.alias)
	}
	return int(c)
}
