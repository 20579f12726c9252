package balance

import (
	"errors"
	"sort"

	"github.com/sluicelb/sluice/api/config"
)

// slotBits sizes the consistent sub-cluster table (2^14 slots): each slot is
// 1/16384 of the key space, so realised shares are within ~0.3 % of the row.
const slotBits = 14

// slotBlackhole is how the slot table and the BFE ranges write
// GSLB_BLACKHOLE (a sub-cluster index otherwise).
const slotBlackhole = 255

// buildSlots assigns every slot of the consistent table. The blackhole is
// decided first by a per-slot uniform draw against its share (a change of the
// blackhole share moves only the keys entering or leaving it); the rest is
// weighted rendezvous over sub-clusters with weight > 0 (a shift of weight
// between two sub-clusters moves that share of keys and no more; a weight-0
// sub-cluster owns nothing).
func buildSlots(c *Cluster) []uint8 {
	n := 1 << slotBits
	out := make([]uint8, n)
	if c.rowTotal == 0 {
		for i := range out {
			out[i] = slotBlackhole
		}
		return out
	}
	bh := float64(c.bhWeight) / float64(c.rowTotal)
	for s := 0; s < n; s++ {
		key := mix(uint64(s) + 0x9e3779b97f4a7c15)
		if c.bhWeight > 0 && unit(mix(key^0x5bd1e995)) < bh {
			out[s] = slotBlackhole
			continue
		}
		if o := rendezvousOwner(c, key, nil); o >= 0 {
			out[s] = uint8(o)
		} else {
			out[s] = slotBlackhole
		}
	}
	return out
}

// rendezvousOwner returns the index of the highest-scoring sub-cluster with
// weight > 0 for which ok is true (nil: all), or -1 if none.
func rendezvousOwner(c *Cluster, key uint64, ok func(int) bool) int {
	best, bestS := -1, 0.0
	for i, g := range c.subs {
		if g.weight <= 0 || (ok != nil && !ok(i)) {
			continue
		}
		s := rendezvousScore(key, g.nameHash, g.weight)
		if best < 0 || s > bestS {
			best, bestS = i, s
		}
	}
	return best
}

// bfeRanges lays out BFE's ranges: members with weight > 0 sorted by name,
// blackhole included (unless skip is non-nil: then only sub-clusters for
// which skip is false, blackhole excluded).
func bfeRanges(c *Cluster, keep func(int) bool) []bfeRange {
	type e struct {
		name string
		w    int
		idx  int
	}
	var es []e
	if keep == nil && c.bhWeight > 0 {
		es = append(es, e{config.Blackhole, c.bhWeight, slotBlackhole})
	}
	for i, g := range c.subs {
		if g.weight > 0 && (keep == nil || keep(i)) {
			es = append(es, e{g.name, g.weight, i})
		}
	}
	sort.Slice(es, func(a, b int) bool { return es[a].name < es[b].name })
	out := make([]bfeRange, 0, len(es))
	end := 0
	for _, x := range es {
		end += x.w
		out = append(out, bfeRange{end, x.idx})
	}
	return out
}

func pickRange(rs []bfeRange, h uint64) int {
	if len(rs) == 0 {
		return -1
	}
	if len(rs) == 1 {
		return rs[0].sub // BFE's single-sub-cluster fast path: no hashing
	}
	v := int(h % uint64(rs[len(rs)-1].end))
	for _, r := range rs {
		if v < r.end {
			return r.sub
		}
	}
	return rs[len(rs)-1].sub
}

// errSpill is pickSub's answer when no weighted sub-cluster has anything
// available: the first attempt goes straight to a cross retry.
var errSpill = errors.New("balance: no weighted sub-cluster has an available instance")

// pickSub chooses the primary sub-cluster. Errors: ErrBlackhole (the
// request is in the blackhole share), ErrNoAvailable (fail_fast: the chosen
// sub-cluster has nothing available; or the cluster is empty) and errSpill.
func (s *Selection) pickSub() (*group, reason, error) {
	c := s.c
	if c.modeKind == modeRequest {
		return c.subFor(c.reg.rand(), false, reasonRequest)
	}
	if h, ok := s.key(); ok {
		return c.subFor(h, true, reasonHash)
	}
	return c.subFor(c.reg.rand(), false, reasonRandom)
}

// subFor is pickSub for the point h: the request key's hash (keyed) or a
// random draw. For a keyed point outside request mode it draws nothing: the
// answer depends only on h and the sub-clusters' availability (explain
// relies on it).
func (c *Cluster) subFor(h uint64, keyed bool, why reason) (*group, reason, error) {
	if len(c.subs) == 0 && c.bhWeight == 0 {
		return nil, why, ErrNoAvailable
	}
	if c.rowTotal == 0 {
		return nil, why, errSpill
	}
	var gi int
	if c.modeKind == modeConsistent {
		gi = int(c.slots[h>>(64-slotBits)])
	} else {
		gi = pickRange(c.bfeRanges, h)
	}
	if gi == slotBlackhole {
		return nil, why, ErrBlackhole
	}
	if gi >= 0 && c.subs[gi].currentView().nAvail > 0 {
		return c.subs[gi], why, nil
	}
	if c.pol.Balance.FailFast {
		return nil, why, ErrNoAvailable
	}
	// Spread the share of an empty sub-cluster over the rest (blackhole excluded).
	avail := func(i int) bool { return c.subs[i].currentView().nAvail > 0 }
	switch c.modeKind {
	case modeConsistent:
		if !keyed {
			h = c.reg.rand()
		}
		gi = rendezvousOwner(c, mix(uint64(h>>(64-slotBits))+0x9e3779b97f4a7c15), avail)
	case modeBFE:
		if !keyed {
			h = c.reg.rand()
		}
		gi = pickRange(bfeRanges(c, avail), h)
	default:
		gi = pickRange(bfeRanges(c, avail), c.reg.rand())
	}
	if gi < 0 || gi == slotBlackhole {
		return nil, reasonFallback, errSpill
	}
	return c.subs[gi], reasonFallback, nil
}
