package balance

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// instance algorithm identifiers.
type algo int

const (
	algoWRR algo = iota
	algoWLC
	algoWLCRandom
	algoP2C
	algoSticky
	algoStickyCookie
	algoStaticRR
	algoRoundRobin
	algoLeastConn
	algoFirst
	algoRandom
	algoSource
)

// subMode is policy.balance.subcluster_mode, compiled.
type subMode uint8

const (
	modeConsistent subMode = iota
	modeBFE
	modeRequest
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

func parseAlgo(s string) (algo, int, error) {
	switch s {
	case "", config.InstanceWRR:
		return algoWRR, 0, nil
	case config.InstanceWLC:
		return algoWLC, 0, nil
	case config.InstanceWLCRandom:
		return algoWLCRandom, 0, nil
	case config.InstanceP2CEWMA:
		return algoP2C, 0, nil
	case config.InstanceSticky:
		return algoSticky, 0, nil
	case config.InstanceStickyCookie:
		return algoStickyCookie, 0, nil
	case config.InstanceStaticRR:
		return algoStaticRR, 0, nil
	case config.InstanceRoundRobin:
		return algoRoundRobin, 0, nil
	case config.InstanceLeastConn:
		return algoLeastConn, 0, nil
	case config.InstanceFirst:
		return algoFirst, 0, nil
	case config.InstanceRandom:
		return algoRandom, 1, nil
	case config.InstanceSource:
		return algoSource, 0, nil
	}
	if inner, ok := strings.CutPrefix(s, config.InstanceRandom+"("); ok {
		if n, err := strconv.Atoi(strings.TrimSuffix(inner, ")")); err == nil && strings.HasSuffix(inner, ")") && n >= 1 && n <= 16 {
			return algoRandom, n, nil
		}
		return 0, 0, fmt.Errorf("policy.balance.instance %q: want random(N) with N in 1..16", s)
	}
	return 0, 0, fmt.Errorf("policy.balance.instance %q: unknown mode", s)
}

// compileCluster checks and compiles one cluster; it does not touch the registry.
func compileCluster(name string, sc snapshot.Cluster) (*Cluster, [][]netip.AddrPort, error) {
	p := sc.Policy
	c := &Cluster{name: name, pol: p, mode: p.Balance.SubclusterMode, key: compileKey(p.Balance.Hash), cookie: p.Balance.StickyCookie}
	if c.mode == "" {
		c.mode = config.SubclusterConsistent
	}
	switch c.mode {
	case config.SubclusterConsistent:
		c.modeKind = modeConsistent
	case config.SubclusterBFE:
		c.modeKind = modeBFE
	case config.SubclusterRequest:
		c.modeKind = modeRequest
	default:
		return nil, nil, fmt.Errorf("policy.balance.subcluster_mode %q: want consistent, bfe or request", c.mode)
	}
	switch c.key.kind {
	case config.HashClientIP, config.HashURI:
	case config.HashHeader, config.HashHeaderOrIP:
		if c.key.header == "" {
			return nil, nil, fmt.Errorf("policy.balance.hash.header is empty: key %q needs a header or Cookie:NAME", c.key.kind)
		}
	default:
		return nil, nil, fmt.Errorf("policy.balance.hash.key %q: want client_ip, header, header_or_ip or uri", c.key.kind)
	}
	if c.cookie == "" {
		c.cookie = "SLUICE_STICKY"
	}
	var err error
	if c.algo, c.randomN, err = parseAlgo(p.Balance.Instance); err != nil {
		return nil, nil, err
	}
	c.algoName = p.Balance.Instance
	if c.algoName == "" {
		c.algoName = config.InstanceWRR
	}
	switch p.Balance.HashType {
	case "", "map-based":
	case "consistent":
		c.consistent = true
	default:
		return nil, nil, fmt.Errorf("policy.balance.hash_type %q: want map-based or consistent", p.Balance.HashType)
	}
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
	c.fast = c.modeKind == modeConsistent && c.key.ipOnly && c.rowTotal > 0 && (c.algo == algoWRR || c.algo == algoRoundRobin)
	switch c.mode {
	case config.SubclusterConsistent:
		c.slots = buildSlots(c)
	case config.SubclusterBFE, config.SubclusterRequest:
		// Request mode draws a random point in the same ranges.
		c.bfeRanges = bfeRanges(c, nil)
	}
	return c, addrs, nil
}
