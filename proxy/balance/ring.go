package balance

import (
	"sort"
)

// ring is a consistent-hash ring over a group's members with virtual nodes
// proportional to weight: when a member becomes unavailable only its keys move
// (to the next points clockwise), which BFE's modulo hashing does not give.
type ring struct {
	points []ringPoint
}

type ringPoint struct {
	hash   uint64
	member int32
}

// ringPointsTarget is the total number of virtual nodes per ring (at least
// one per member with weight > 0).
const ringPointsTarget = 1 << 14

func buildRing(ms []member) *ring {
	total := 0
	n := 0
	for _, m := range ms {
		if m.weight > 0 {
			total += m.weight
			n++
		}
	}
	r := &ring{}
	if total == 0 {
		return r
	}
	per := max(ringPointsTarget, 40*n)
	for i, m := range ms {
		if m.weight <= 0 {
			continue
		}
		v := max(1, int(int64(m.weight)*int64(per)/int64(total)))
		for k := 0; k < v; k++ {
			r.points = append(r.points, ringPoint{mix(m.addrHash + uint64(k)*0x9e3779b97f4a7c15), int32(i)})
		}
	}
	sort.Slice(r.points, func(a, b int) bool { return r.points[a].hash < r.points[b].hash })
	return r
}

// lookup walks clockwise from h and returns the first member for which ok
// is true, or -1.
func (r *ring) lookup(h uint64, ok func(int) bool) int {
	n := len(r.points)
	if n == 0 {
		return -1
	}
	start := sort.Search(n, func(i int) bool { return r.points[i].hash >= h })
	for k := 0; k < n; k++ {
		m := int(r.points[(start+k)%n].member)
		if ok(m) {
			return m
		}
	}
	return -1
}
