package balance

import (
	"cmp"
	"slices"
)

// ring is a consistent-hash ring over a group's members (ketama, as nginx's
// `hash … consistent` and HAProxy's `hash-type consistent`): each member owns
// points on a 64-bit circle and a key belongs to the first point clockwise
// of its hash whose member is acceptable.
//
// A member's points depend only on its own identity (the hash of addr:port)
// and its own weight: point k of a member is mix(addrHash + k·φ), for
// k < pointsFor(weight). Adding or removing an instance therefore adds or
// removes only its own points: the keys that move are exactly the keys it
// takes or the keys it had (≈ weight/Σweight of them), the other members'
// keys stay where they are. Rings that spread a fixed point budget over the
// members (points ∝ weight/Σweight, as Envoy's ring_hash does) re-spread
// every member's points when one leaves and move ~14 % of the others' keys
// (issue 17, defect 5).
type ring struct {
	points []ringPoint
	shift  uint // points per member were divided by 2^shift to fit ringMaxPoints
	// index[b] is the first point whose hash's top indexBits bits are ≥ b
	// (index[len-1] = len(points)): a lookup scans one bucket of about
	// ringBucketPoints points instead of binary-searching the whole ring.
	index     []uint32
	indexBits uint
}

// ringBucketPoints is the mean number of points per index bucket.
const ringBucketPoints = 4

// ringPoint is 8 bytes: the top 32 bits of the point's hash (a million
// points on a 2^32 circle: a collision orders the two by member identity)
// and the member's index.
type ringPoint struct {
	hash   uint32
	member int32
}

const (
	// ringPointsPerWeight is the points per unit of weight: a weight-1
	// member's share of keys is within ≈ ±6 % (one standard deviation,
	// relative) of its fair share (ketama's 160 gives ±8 %, and 25 % off
	// for the worst of 50 instances).
	ringPointsPerWeight = 256
	// ringMaxPoints bounds one ring (8 B a point: 4 MiB). A group whose
	// Σ 256·weight exceeds it has every member's point count halved until it
	// fits (shift); the halved set is a prefix of the full one, and the
	// shift depends only on Σ weight, so it changes only when Σ weight
	// crosses a power-of-two multiple of ringMaxPoints/256 = 2 048
	// (e.g. 2 048 instances of weight 1, or 20 of weight 100). Within one
	// shift, membership changes move only the changed members' keys.
	ringMaxPoints = 1 << 19
)

// ringShift is the smallest shift that fits the group's points in
// ringMaxPoints.
func ringShift(ms []member) uint {
	var total int64
	for _, m := range ms {
		if m.weight > 0 {
			total += int64(m.weight) * ringPointsPerWeight
		}
	}
	s := uint(0)
	for total>>s > ringMaxPoints {
		s++
	}
	return s
}

// pointsFor is a member's point count: its own weight's, never 0 for a
// weight > 0.
func pointsFor(weight int, shift uint) int {
	if weight <= 0 {
		return 0
	}
	return max(1, int((int64(weight)*ringPointsPerWeight)>>shift))
}

func buildRing(ms []member) *ring {
	r := &ring{shift: ringShift(ms)}
	n := 0
	for _, m := range ms {
		n += pointsFor(m.weight, r.shift)
	}
	r.points = make([]ringPoint, 0, n)
	for i, m := range ms {
		for k := range pointsFor(m.weight, r.shift) {
			r.points = append(r.points, ringPoint{ringPointHash(m.addrHash, k), int32(i)})
		}
	}
	// Equal point hashes (two members, 1 in 2^64 per pair of points) are
	// ordered by the members' identities, not by their place in the list,
	// so the ring does not depend on the order instances are listed in.
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(ms[a.member].addrHash, ms[b.member].addrHash)
	})
	r.buildIndex()
	return r
}

// buildIndex fills r.index for r.points (sorted).
func (r *ring) buildIndex() {
	for r.indexBits < 24 && len(r.points)>>r.indexBits > ringBucketPoints {
		r.indexBits++
	}
	r.index = make([]uint32, 1<<r.indexBits+1)
	p := 0
	for b := range r.index {
		for p < len(r.points) && uint64(r.points[p].hash)>>(32-r.indexBits) < uint64(b) {
			p++
		}
		r.index[b] = uint32(p)
	}
}

// start is the first point whose hash is ≥ h32 (len(points) if none):
// the binary search's answer, from the index bucket of h32.
func (r *ring) start(h32 uint32) int {
	b := uint64(h32) >> (32 - r.indexBits)
	i, end := int(r.index[b]), int(r.index[b+1])
	for i < end && r.points[i].hash < h32 {
		i++
	}
	return i
}

// ringPointHash is point k of the member whose identity hashes to id.
func ringPointHash(id uint64, k int) uint32 {
	return uint32(mix(id+uint64(k)*0x9e3779b97f4a7c15) >> 32)
}

// lookup walks clockwise from h and returns the first member for which ok
// is true, or -1. The start is found in the index (O(1): one bucket); the
// walk passes only points of members ok refuses.
func (r *ring) lookup(h uint64, ok func(int) bool) int {
	n := len(r.points)
	if n == 0 {
		return -1
	}
	i := r.start(uint32(h >> 32))
	for range n {
		if i == n {
			i = 0
		}
		if m := int(r.points[i].member); ok(m) {
			return m
		}
		i++
	}
	return -1
}

// at is the member of the first point clockwise from h — lookup's answer
// when ok accepts it — or -1 for an empty ring.
func (r *ring) at(h uint64) int {
	n := len(r.points)
	if n == 0 {
		return -1
	}
	i := r.start(uint32(h >> 32))
	if i == n {
		i = 0
	}
	return int(r.points[i].member)
}
