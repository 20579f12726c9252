package balance

// smoothWRR is the classic O(n) smooth WRR (nginx's algorithm step by
// step): the reference the precomputed schedule is tested and measured against.
type smoothWRR struct {
	current []int64
}

// pick returns the chosen index among weights (skipping ok[i] == false), or -1.
func (s *smoothWRR) pick(weights []int, ok func(i int) bool) int {
	if len(s.current) != len(weights) {
		s.current = make([]int64, len(weights))
	}
	best, total := -1, int64(0)
	for i, w := range weights {
		if w <= 0 || (ok != nil && !ok(i)) {
			continue
		}
		s.current[i] += int64(w)
		total += int64(w)
		if best < 0 || s.current[i] > s.current[best] {
			best = i
		}
	}
	if best >= 0 {
		s.current[best] -= total
	}
	return best
}
