package plan

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// spread adds points to the targets in proportion to weight (largest
// remainder; equal shares when every weight is 0). It reports false, and
// changes nothing, when there is no target.
func spread(row map[string]int, points int, targets []string, weight func(string) float64) bool {
	if points <= 0 {
		return true
	}
	if len(targets) == 0 {
		return false
	}
	shares := make(map[string]float64, len(targets))
	var sum float64
	for _, t := range targets {
		shares[t] = max(0, weight(t))
		sum += shares[t]
	}
	if sum == 0 {
		for _, t := range targets {
			shares[t] = 1
		}
	}
	for k, v := range largestRemainder(targets, shares, points) {
		row[k] += v
	}
	return true
}

// take removes up to points from the sources in proportion to their
// current weight and returns how many it removed.
func take(row map[string]int, points int, sources []string) int {
	have := 0
	for _, s := range sources {
		have += row[s]
	}
	points = min(points, have)
	if points <= 0 {
		return 0
	}
	shares := make(map[string]float64, len(sources))
	for _, s := range sources {
		shares[s] = float64(row[s])
	}
	cut := largestRemainder(sources, shares, points)
	// Largest remainder never asks more than an entry has: its quota is at
	// most the entry's weight and it is rounded up by less than one.
	for _, s := range sources {
		row[s] -= cut[s]
	}
	return points
}

// maxStep bounds how far each entry of next may move from prev in one
// publish: at most step points, except that weight on entries that are
// not available (or no longer exist) leaves at once — that freed weight is
// first given to next's positive entries in proportion. The bounded row is
// the point base + α·(next − base) with the largest α ≤ 1 that respects the
// bound, rounded by largest remainder (which keeps every entry within the
// bound, because base and step are integers). It returns the row and the
// entries it held back.
func maxStep(keys []string, prev, next map[string]int, step int, available func(string) bool) (map[string]int, []string) {
	total := 0
	for _, k := range keys {
		total += next[k]
	}
	known := make(map[string]bool, len(keys))
	for _, k := range keys {
		known[k] = true
	}
	base := make(map[string]int, len(keys))
	freed := 0
	for k, w := range prev {
		if !known[k] || (k != config.Blackhole && !available(k)) {
			freed += w
			continue
		}
		base[k] = w
	}
	if freed > 0 {
		var targets []string
		for _, k := range keys {
			if next[k] > 0 {
				targets = append(targets, k)
			}
		}
		spread(base, freed, targets, func(k string) float64 { return float64(next[k]) })
	}
	maxDelta := 0
	for _, k := range keys {
		maxDelta = max(maxDelta, absInt(next[k]-base[k]))
	}
	if maxDelta <= step {
		return next, nil
	}
	alpha := float64(step) / float64(maxDelta)
	shares := make(map[string]float64, len(keys))
	for _, k := range keys {
		shares[k] = float64(base[k]) + alpha*float64(next[k]-base[k])
	}
	out := largestRemainder(keys, shares, total)
	var held []string
	for _, k := range keys {
		if out[k] != next[k] {
			held = append(held, fmt.Sprintf("%s %d→%d (target %d)", k, prev[k], out[k], next[k]))
		}
	}
	return out, held
}

func absInt(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// maxRowChange is the largest change of one entry between two rows.
func maxRowChange(a, b map[string]int) int {
	m := 0
	for k, v := range a {
		m = max(m, absInt(v-b[k]))
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			m = max(m, absInt(v))
		}
	}
	return m
}

func formatRow(keys []string, row map[string]int) string {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, row[k])
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
