package balance

import (
	"math"
	"testing"
)

// aliasMass is member i's mass over all columns of t: its own columns'
// cuts plus what each column aliased to it leaves above its cut.
func aliasMass(t aliasTable, total int64) []int64 {
	m := make([]int64, len(t))
	for c, col := range t {
		m[c] += col.cut
		m[col.alias] += total - col.cut
	}
	return m
}

// The alias table is exact: over random weights (zeros, one huge weight,
// the largest allowed), every member's mass is weights[i] × columns —
// the probability weights[i] / total the prefix sums give — and every
// cut lies in [0, total].
func TestAliasTableIsExact(t *testing.T) {
	rnd := seededRand(7)
	for trial := range 3000 {
		ws, total := randomWeights(rnd, trial, 64, 100, true)
		n := len(ws)
		tab := newAlias(ws, total)
		for c, col := range tab {
			if col.cut < 0 || col.cut > total || col.alias < 0 || int(col.alias) >= n {
				t.Fatalf("trial %d: column %d %+v out of range (total %d)", trial, c, col, total)
			}
		}
		for i, m := range aliasMass(tab, total) {
			if m != int64(ws[i])*int64(n) {
				t.Fatalf("trial %d (n=%d): member %d has mass %d, want %d × %d", trial, n, i, m, ws[i], n)
			}
		}
	}
}

// draw reads the column from the random word's high bits and the fraction
// from the rest: the extremes of the word land on the first and last
// columns, and a cut splits a column between its member and its alias.
func TestAliasDrawMapsTheWord(t *testing.T) {
	tab := aliasTable{{cut: 3, alias: 1}, {cut: 4, alias: 1}}
	const total = 4
	for _, c := range []struct {
		r    uint64
		want int
	}{
		{0, 0},             // column 0, y 0 < 3
		{1<<62 + 1, 0},     // column 0, fraction ½: y = 2 < 3
		{1<<62 + 1<<61, 1}, // column 0, fraction ¾: y = 3, the alias
		{1<<63 - 1, 1},     // column 0, fraction ≈ 1: the alias
		{1 << 63, 1},       // column 1
		{math.MaxUint64, 1},
	} {
		if got := tab.draw(c.r, total); got != c.want {
			t.Errorf("draw(%#x) = %d, want %d", c.r, got, c.want)
		}
	}
}

// randomWeights are the weights of trial: 1..maxN members (bigEvery-th
// trial: 5 000), a fifth of them 0 (unavailable), a tenth
// config.MaxInstanceWeight when heavy, the others 1..7; never all 0.
func randomWeights(rnd func() uint64, trial, maxN, bigEvery int, heavy bool) ([]int, int64) {
	n := 1 + int(rnd()%uint64(maxN))
	if trial%bigEvery == 0 {
		n = 5000
	}
	ws := make([]int, n)
	var total int64
	for i := range ws {
		switch r := rnd() % 10; {
		case r < 2:
		case r < 3 && heavy:
			ws[i] = 1_000_000 // config.MaxInstanceWeight
		default:
			ws[i] = 1 + int(rnd()%7)
		}
		total += int64(ws[i])
	}
	if total == 0 {
		ws[0], total = 1, 1
	}
	return ws, total
}
