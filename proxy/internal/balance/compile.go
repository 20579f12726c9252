package balance

import (
	"fmt"
	"net/netip"
	"sort"

	"github.com/sluicelb/sluice/api/config"
	polparse "github.com/sluicelb/sluice/api/policy"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// algo is an instance algorithm, parsed by api/policy (the parser
// api/validate uses too).
type algo = polparse.Algo

const (
	algoWRR          = polparse.WRR
	algoWLC          = polparse.WLC
	algoWLCRandom    = polparse.WLCRandom
	algoP2C          = polparse.P2CEWMA
	algoSticky       = polparse.Sticky
	algoStickyCookie = polparse.StickyCookie
	algoStaticRR     = polparse.StaticRR
	algoRoundRobin   = polparse.RoundRobin
	algoLeastConn    = polparse.LeastConn
	algoFirst        = polparse.First
	algoRandom       = polparse.Random
	algoSource       = polparse.Source
	algoRingHash     = polparse.RingHash
	algoURI          = polparse.URI
	algoHdr          = polparse.Hdr
	algoURLParam     = polparse.URLParam
)

// subMode is policy.balance.subcluster_mode, parsed by api/policy.
type subMode = polparse.Mode

const (
	modeConsistent = polparse.Consistent
	modeBFE        = polparse.BFE
	modeRequest    = polparse.Request
)

func rulesOf(p config.Policy) healthRules {
	h := healthRules{
		failNum: p.Health.FailNum, succNum: p.Health.SuccNum,
		checkInterval: p.Health.CheckInterval.D(), active: p.Health.Active,
		interval: p.Health.Interval.D(), timeout: p.Health.Timeout.D(),
		rise: p.Health.Rise, fall: p.Health.Fall, probe: p.Health.Probe,
		slowStart: p.SlowStart.Window.D(), floorPercent: p.SlowStart.FloorPercent,
	}
	if p.Balance.EffectiveWeights {
		h.effFailNum = max(1, p.Health.FailNum)
	}
	return h
}

// compileCluster checks and compiles one cluster; it does not touch the registry.
func compileCluster(name string, sc snapshot.Cluster) (*Cluster, [][]netip.AddrPort, error) {
	p := sc.Policy
	c := &Cluster{name: name, pol: p, mode: p.Balance.SubclusterMode, key: compileKey(p.Balance.Hash), cookie: p.Balance.StickyCookie}
	// The policy strings are parsed by api/policy, as api/validate parses
	// them: a snapshot that passed validation compiles.
	var err error
	if c.modeKind, err = polparse.ParseMode(c.mode); err != nil {
		return nil, nil, fmt.Errorf("policy.balance.subcluster_mode: %w", err)
	}
	key, err := polparse.ParseKey(p.Balance.Hash.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("policy.balance.hash.key: %w", err)
	}
	if key.NeedsHeader() && c.key.header == "" {
		return nil, nil, fmt.Errorf("policy.balance.hash.header is empty: key %q needs a header or Cookie:NAME", c.key.kind)
	}
	if c.cookie == "" {
		c.cookie = "SLUICE_STICKY"
	}
	in, err := polparse.ParseInstance(p.Balance.Instance)
	if err != nil {
		return nil, nil, fmt.Errorf("policy.balance.instance: %w", err)
	}
	c.algo, c.randomN, c.algoName = in.Algo, in.Choices, p.Balance.Instance
	c.instKey = instKey{algo: in.Algo, param: in.Param, whole: in.Whole}
	ht, err := polparse.ParseHashType(p.Balance.HashType)
	if err != nil {
		return nil, nil, fmt.Errorf("policy.balance.hash_type: %w", err)
	}
	c.consistent = ht == polparse.ConsistentHash
	if p.Health.OutlierStatus != "" {
		m, err := statusmatch.Parse(p.Health.OutlierStatus)
		if err != nil {
			return nil, nil, fmt.Errorf("policy.health.outlier_status: %w", err)
		}
		c.outlier, c.hasOutlier = m, true
	}
	if p.SlowStart.Window < 0 || (p.SlowStart.Window > 0 && (p.SlowStart.FloorPercent < 1 || p.SlowStart.FloorPercent > 100)) {
		return nil, nil, fmt.Errorf("policy.slow_start: window %s floor_percent %d: want window ≥ 0 and floor 1..100", p.SlowStart.Window, p.SlowStart.FloorPercent)
	}
	for w, v := range sc.Row.Weights {
		if v < 0 {
			return nil, nil, fmt.Errorf("row.weights[%q] = %d: must be ≥ 0", w, v)
		}
		if w != config.Blackhole {
			if _, ok := sc.SubClusters[w]; !ok {
				return nil, nil, fmt.Errorf("row.weights[%q]: unknown sub-cluster", w)
			}
		}
	}
	c.bhWeight = sc.Row.Weights[config.Blackhole]
	names := make([]string, 0, len(sc.SubClusters))
	for n, s := range sc.SubClusters {
		if n == config.Blackhole {
			return nil, nil, fmt.Errorf("subclusters[%q]: reserved name", n)
		}
		if !s.Excluded {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) >= slotBlackhole {
		return nil, nil, fmt.Errorf("subclusters: %d, at most %d", len(names), slotBlackhole-1)
	}
	addrs := make([][]netip.AddrPort, len(names))
	seenAddr := map[netip.AddrPort]bool{}
	for gi, n := range names {
		s := sc.SubClusters[n]
		g := &group{c: c, idx: gi, name: n, nameHash: hashString(n), weight: sc.Row.Weights[n]}
		for ii, in := range s.Instances {
			ip, err := netip.ParseAddr(in.Addr)
			if err != nil {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].addr %q: %w", n, ii, in.Addr, err)
			}
			if in.Port < 1 || in.Port > 65535 {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].port %d: want 1..65535", n, ii, in.Port)
			}
			if in.Weight < 0 || in.Weight > config.MaxInstanceWeight {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d].weight %d: want 0..%d", n, ii, in.Weight, config.MaxInstanceWeight)
			}
			a := netip.AddrPortFrom(ip.Unmap(), uint16(in.Port))
			if seenAddr[a] {
				return nil, nil, fmt.Errorf("subclusters[%q].instances[%d]: duplicate address %s", n, ii, a)
			}
			seenAddr[a] = true
			addrs[gi] = append(addrs[gi], a)
			ok := in.State != config.StateDraining && in.State != config.StateUnhealthy
			g.members = append(g.members, member{weight: in.Weight, agentOK: ok})
		}
		c.subs = append(c.subs, g)
	}
	c.rowTotal = c.bhWeight
	for _, g := range c.subs {
		c.rowTotal += g.weight
	}
	c.picker = newPicker(c)
	c.stickyCookie = c.algo == algoStickyCookie
	c.latency = c.algo == algoP2C
	c.fastSub = c.modeKind == modeConsistent && c.key.ipOnly && c.rowTotal > 0
	c.fast = c.fastSub && (c.algo == algoWRR || c.algo == algoRoundRobin)
	switch c.modeKind {
	case modeConsistent:
		c.slots = buildSlots(c)
	case modeBFE, modeRequest:
		// Request mode draws a random point in the same ranges.
		c.bfeRanges = bfeRanges(c, nil)
	}
	return c, addrs, nil
}
