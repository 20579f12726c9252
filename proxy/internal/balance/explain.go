package balance

import (
	"errors"
	"net/http"
	"net/netip"

	"github.com/sluicelb/sluice/api/config"
)

// Explanation says where a request's first attempt goes and how certain
// that is. It never names one instance for a choice the request does not
// decide: Deterministic is true only when the sub-cluster and the instance
// are both functions of the request (a hashing sub-cluster mode with a key,
// and sticky, source, sticky-cookie with a valid cookie, or first without
// a connection cap) and the current health — then Instance is the instance
// real requests go to. Otherwise Instance is empty and Candidates lists
// what the pick chooses from, with the effective weights, marking the
// instance this proxy's next pick would take when the algorithm's state
// says so (wrr, roundrobin, static-rr, wlc, leastconn, first; not random,
// p2c-ewma or wlc-random).
type Explanation struct {
	Cluster   string `json:"cluster"`
	Version   uint64 `json:"version"`
	Mode      string `json:"subcluster_mode"`
	HashKey   string `json:"hash_key"`
	KeyHash   uint64 `json:"key_hash,omitempty"`
	KeyRandom bool   `json:"key_random,omitempty"` // empty key: a random draw
	// SubCluster is the sub-cluster the request goes to, when the request
	// decides it; empty when every request draws (request mode, no key).
	SubCluster string `json:"subcluster,omitempty"`
	// Shares is the effective row (percent) a drawn sub-cluster comes from.
	Shares    map[string]float64 `json:"subcluster_shares,omitempty"`
	Blackhole bool               `json:"blackhole,omitempty"`
	Algorithm string             `json:"algorithm"`
	// Deterministic: Instance is where this request goes.
	Deterministic bool   `json:"deterministic"`
	Instance      string `json:"instance,omitempty"`
	// InstanceBy says what decides Instance: "cookie" (a valid sticky
	// cookie), "hash" (sticky, source), "first" (the first available) or
	// "only-available" (the sub-cluster has one available instance).
	InstanceBy string `json:"instance_by,omitempty"`
	// Candidates are the available instances the pick chooses from (of
	// SubCluster, or of every sub-cluster with a share when it is drawn).
	Candidates []Candidate `json:"candidates,omitempty"`
	// Cursors is how many schedule cursors (stripes) the proxy keeps: a
	// candidate marked Next is the next pick on cursor 0; client
	// connections are spread over the cursors, each walking the same
	// sequence from its own position.
	Cursors int    `json:"cursors,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Cross   bool   `json:"cross,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Candidate is one instance a non-deterministic pick chooses from.
type Candidate struct {
	SubCluster string `json:"subcluster"`
	Addr       string `json:"addr"`
	Weight     int    `json:"effective_weight"`
	InFlight   int64  `json:"in_flight"`
	// Next: this proxy's next pick in the sub-cluster takes it.
	Next bool `json:"next,omitempty"`
}

// Explain reports where the first attempt of req would go. It changes no
// state that requests see: nothing is acquired, no cursor or tie-break
// state advances, nothing is drawn.
func (c *Cluster) Explain(req *http.Request, clientIP netip.Addr) Explanation {
	s := &Selection{c: c, req: req, ip: clientIP, primary: -1}
	ex := Explanation{Cluster: c.name, Version: c.table.Version(), Mode: c.mode, HashKey: c.key.kind,
		Algorithm: c.algoName, Cursors: c.reg.stripes}
	if c.key.header != "" {
		ex.HashKey += ":" + c.key.header
	}
	h, keyed := s.key()
	ex.KeyHash, ex.KeyRandom = h, !keyed
	if c.modeKind == modeRequest || !keyed {
		ex.Reason = reasonNames[reasonRandom]
		if c.modeKind == modeRequest {
			ex.Reason = reasonNames[reasonRequest]
		}
		ex.Shares = c.effectiveRow()
		if c.stickyCookie && c.bhWeight == 0 {
			// No blackhole share to draw first: a valid cookie decides.
			if cg, i, ok := s.cookieTarget(); ok {
				ex.SubCluster, ex.Instance, ex.Deterministic = cg.name, cg.members[i].ep.addr.String(), true
				ex.Reason, ex.InstanceBy = reasonNames[reasonCookie], reasonNames[reasonCookie]
				return ex
			}
		}
		for _, g := range c.subs {
			if ex.Shares[g.name] > 0 {
				c.explainInstance(s, g, &ex, false)
			}
		}
		return ex
	}
	g, why, err := c.subFor(h, true, reasonHash)
	ex.Reason = reasonNames[why]
	switch {
	case errors.Is(err, ErrBlackhole):
		ex.Blackhole, ex.SubCluster, ex.Reason, ex.Deterministic = true, config.Blackhole, "blackhole", true
		return ex
	case errors.Is(err, errSpill):
		// A cross retry into a sub-cluster drawn by the row.
		ex.Cross, ex.Reason = true, reasonNames[reasonCross]
		for _, g := range c.subs {
			if g.currentView().nAvail > 0 {
				c.explainInstance(s, g, &ex, false)
			}
		}
		if len(ex.Candidates) == 0 {
			ex.Error = ErrNoAvailable.Error()
		}
		return ex
	case err != nil:
		ex.Error = err.Error()
		return ex
	}
	ex.SubCluster = g.name
	if c.stickyCookie {
		if cg, i, ok := s.cookieTarget(); ok {
			ex.SubCluster, ex.Instance, ex.Deterministic = cg.name, cg.members[i].ep.addr.String(), true
			ex.Reason, ex.InstanceBy = reasonNames[reasonCookie], reasonNames[reasonCookie]
			return ex
		}
	}
	c.explainInstance(s, g, &ex, true)
	if len(ex.Candidates) == 0 && ex.Instance == "" {
		ex.Error = ErrNoAvailable.Error()
	}
	return ex
}

// explainInstance explains the instance pick in g. When decide is set
// (the request decided g) and the request decides the instance too, it
// sets ex.Instance and ex.Deterministic; otherwise it appends g's
// candidates, the next pick marked when known.
func (c *Cluster) explainInstance(s *Selection, g *group, ex *Explanation, decide bool) {
	v := g.currentView()
	if v.nAvail == 0 {
		return
	}
	ok := func(i int) bool { return v.avail[i] }
	fixed, by := -1, "hash"
	if v.nAvail == 1 {
		by = "only-available"
		// One available instance: whatever the algorithm, it takes the pick.
		for i := range v.avail {
			if v.avail[i] {
				fixed = i
			}
		}
	}
	switch {
	case fixed >= 0:
	case c.algo == algoSource:
		if s.ip.IsValid() {
			fixed = hashedPick(g, v, hashAddr(s.ip), ok, c.consistent)
		}
	case c.algo == algoURI || c.algo == algoHdr || c.algo == algoURLParam:
		if h, keyed := c.instKey.hash(s.req); keyed {
			fixed = hashedPick(g, v, h, ok, c.consistent)
		}
	case c.algo == algoSticky || c.algo == algoRingHash:
		if h, keyed := s.key(); keyed && c.pol.Balance.BoundedLoadPercent <= 0 {
			fixed = g.ring.lookup(h, ok)
		}
	case c.algo == algoFirst:
		if c.pol.Pool.MaxConnsPerHost <= 0 {
			fixed, by = firstAvail{}.scan(g, ok), "first"
		}
	}
	if fixed >= 0 && decide {
		ex.Instance, ex.InstanceBy, ex.Deterministic = g.members[fixed].ep.addr.String(), by, true
		return
	}
	next := fixed
	if next < 0 {
		next = c.nextPick(g, v)
	}
	for i, m := range g.members {
		if v.avail[i] && v.weights[i] > 0 {
			ex.Candidates = append(ex.Candidates, Candidate{SubCluster: g.name, Addr: m.ep.addr.String(),
				Weight: v.weights[i], InFlight: m.ep.InFlight(), Next: i == next})
		}
	}
}

// nextPick is the member the next first-attempt pick in g would take on
// cursor 0, without advancing anything; -1 when the algorithm draws.
func (c *Cluster) nextPick(g *group, v *view) int {
	switch c.algo {
	case algoWRR, algoRoundRobin, algoStickyCookie:
		if len(v.sched.order) > 0 {
			return int(v.sched.peek(0, 0))
		}
	case algoStaticRR:
		for k := range len(g.base.order) {
			if i := int(g.base.peek(0, k)); v.avail[i] {
				return i
			}
		}
	case algoFirst:
		return firstAvail{int64(c.pol.Pool.MaxConnsPerHost)}.scan(g, func(i int) bool { return v.avail[i] })
	case algoWLC, algoLeastConn:
		return leastLoad{}.next(c, g, v)
	}
	return -1
}

// next is the wlc or leastconn first-attempt pick, read without advancing
// the schedule cursor or the rotation.
func (leastLoad) next(c *Cluster, g *group, v *view) int {
	ok := func(i int) bool { return v.avail[i] && v.weights[i] > 0 }
	best, ties, bn, bw := leastScan(g, v, ok)
	if ties <= 1 {
		return best
	}
	isTie := func(i int) bool { return ok(i) && g.members[i].ep.InFlight()*bw == bn*int64(v.weights[i]) }
	from := int((g.rr.Load() + 1) % uint64(len(g.members)))
	if c.algo == algoWLC && len(v.sched.order) > 0 {
		for k := range scheduleTries {
			if from = int(v.sched.peek(0, k)); isTie(from) {
				return from
			}
		}
	}
	return firstFrom(len(g.members), from, isTie, best)
}

// effectiveRow is the share (percent) each sub-cluster gets now, the
// blackhole included, after the share of sub-clusters with nothing
// available was spread over the others (fail_fast: not spread).
func (c *Cluster) effectiveRow() map[string]float64 {
	out := map[string]float64{}
	if c.rowTotal == 0 {
		return out
	}
	spreadable := 0
	for _, g := range c.subs {
		if g.currentView().nAvail > 0 {
			spreadable += g.weight
		}
	}
	bh := float64(c.bhWeight) * 100 / float64(c.rowTotal)
	if c.bhWeight > 0 {
		out[config.Blackhole] = bh
	}
	for _, g := range c.subs {
		share := 0.0
		if g.currentView().nAvail > 0 && spreadable > 0 {
			if c.pol.Balance.FailFast {
				share = float64(g.weight) * 100 / float64(c.rowTotal)
			} else {
				share = (100 - bh) * float64(g.weight) / float64(spreadable)
			}
		}
		out[g.name] = share
	}
	return out
}
