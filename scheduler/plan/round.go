package plan

import (
	"math"
	"sort"
)

// largestRemainder rounds non-negative shares (any scale) to integers that
// sum exactly to total, in proportion to the shares: each entry gets the
// floor of its exact quota, and the points left go to the largest
// fractional remainders (ties to the earlier key, keys are sorted). With all
// shares zero the result is all zeros.
func largestRemainder(keys []string, shares map[string]float64, total int) map[string]int {
	out := make(map[string]int, len(keys))
	var sum float64
	for _, k := range keys {
		sum += max(0, shares[k])
	}
	if sum <= 0 || total <= 0 {
		for _, k := range keys {
			out[k] = 0
		}
		return out
	}
	type rem struct {
		key  string
		frac float64
	}
	rems := make([]rem, 0, len(keys))
	given := 0
	for _, k := range keys {
		q := max(0, shares[k]) / sum * float64(total)
		f := math.Floor(q + 1e-9) // 29.999999999 is 30
		if f > q {
			q = f
		}
		out[k] = int(f)
		given += int(f)
		// Quantised so that float noise cannot break a tie (12.5 vs
		// 12.4999999999): ties go to the earlier key, run after run.
		rems = append(rems, rem{k, math.Round((q-f)*1e9) / 1e9})
	}
	sort.SliceStable(rems, func(i, j int) bool { return rems[i].frac > rems[j].frac })
	for i := 0; given < total; i++ {
		out[rems[i%len(rems)].key]++
		given++
	}
	for i := len(rems) - 1; given > total; i-- { // only after float trouble
		if k := rems[(i%len(rems)+len(rems))%len(rems)].key; out[k] > 0 {
			out[k]--
			given--
		}
	}
	return out
}
