package snapshot

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/sluicelb/sluice/api/config"
)

// ErrUnknownProxyCluster is returned (wrapped) by FromState when the proxy
// cluster is not in the state's topology.
var ErrUnknownProxyCluster = errors.New("unknown proxy cluster")

// FromState compiles a desired state into the snapshot of one proxy cluster
// without a scheduler: each cluster's row is that proxy cluster's pin, or,
// without a pin, StaticRow's capacity-proportional row. Drained sub-clusters
// are marked excluded. Products, the default product, the proxy cluster's IDC
// and trusted proxies are copied. meta.ProxyCluster is set to proxyCluster and
// meta.Hash to the content hash. The state is not validated here (callers run
// api/validate on the state and on the result); s is not modified and shares
// no memory with the result.
func FromState(s *config.State, proxyCluster string, meta Meta) (*Snapshot, error) {
	pc, ok := s.Topology.ProxyClusters[proxyCluster]
	if !ok {
		return nil, fmt.Errorf("snapshot from state: %w %q (topology has %v)",
			ErrUnknownProxyCluster, proxyCluster, slices.Sorted(maps.Keys(s.Topology.ProxyClusters)))
	}
	meta.ProxyCluster = proxyCluster
	meta.Hash = ""
	out := &Snapshot{
		Meta:           meta,
		Settings:       Settings{IDC: pc.IDC, TrustedProxies: slices.Clone(pc.TrustedProxies)},
		DefaultProduct: s.DefaultProduct,
	}
	if len(s.Products) > 0 {
		out.Products = make(map[string]config.Product, len(s.Products))
		for name, p := range s.Products {
			out.Products[name] = config.Product{Hosts: slices.Clone(p.Hosts), Rules: slices.Clone(p.Rules)}
		}
	}
	drained := drainedSet(s)
	if len(s.Clusters) > 0 {
		out.Clusters = make(map[string]Cluster, len(s.Clusters))
		for name, c := range s.Clusters {
			subs := make(map[string]config.SubCluster, len(c.SubClusters))
			for sn, sc := range c.SubClusters {
				sc.Instances = cloneInstances(sc.Instances)
				if drained[name][sn] {
					sc.Excluded = true
				}
				subs[sn] = sc
			}
			row := StaticRow(s, proxyCluster, name)
			out.Clusters[name] = Cluster{
				SubClusters: subs,
				Policy:      clonePolicy(c.Policy),
				Row:         row,
				Explanation: &Explanation{Mode: explanationMode(row)},
			}
		}
	}
	out.Meta.Hash = ContentHash(out)
	return out, nil
}

func explanationMode(r Row) string {
	if r.Pinned {
		return "pinned"
	}
	return "static"
}

// StaticRow is the weight row of (proxyCluster, cluster) without a scheduler:
// the pin if there is one (Pinned, denominator 100); otherwise each
// sub-cluster's share is proportional to the sum of its instance weights,
// rounded to integers summing to 100 by largest remainder (ties to the name
// first in order), with excluded and drained sub-clusters at 0. When no
// available sub-cluster has instance weight (e.g. instances come from agents
// later), the available ones share 100 equally. When none is available, the
// whole row is GSLB_BLACKHOLE with AllowFullDrop. The weights map always
// holds every sub-cluster and GSLB_BLACKHOLE.
func StaticRow(s *config.State, proxyCluster, cluster string) Row {
	c := s.Clusters[cluster]
	for _, p := range s.Pins {
		if p.ProxyCluster == proxyCluster && p.Cluster == cluster {
			w := make(map[string]int, len(c.SubClusters)+1)
			for sn := range c.SubClusters {
				w[sn] = 0
			}
			w[config.Blackhole] = 0
			maps.Copy(w, p.Weights)
			return Row{Denominator: config.DefaultDenominator, Weights: w, Pinned: true, AllowFullDrop: p.AllowFullDrop}
		}
	}
	drained := drainedSet(s)[cluster]
	names := slices.Sorted(maps.Keys(c.SubClusters))
	sums := make([]int64, len(names))
	var avail []int
	for i, sn := range names {
		sc := c.SubClusters[sn]
		if sc.Excluded || drained[sn] {
			continue
		}
		avail = append(avail, i)
		for _, in := range sc.Instances {
			if in.Weight > 0 {
				sums[i] += int64(in.Weight)
			}
		}
	}
	var total int64
	for _, i := range avail {
		total += sums[i]
	}
	if total == 0 {
		for _, i := range avail {
			sums[i] = 1
		}
		total = int64(len(avail))
	}
	w := make(map[string]int, len(names)+1)
	for _, sn := range names {
		w[sn] = 0
	}
	w[config.Blackhole] = 0
	if total == 0 {
		w[config.Blackhole] = config.DefaultDenominator
		return Row{Denominator: config.DefaultDenominator, Weights: w, AllowFullDrop: true}
	}
	for i, share := range LargestRemainder(sums, config.DefaultDenominator) {
		w[names[i]] = share
	}
	return Row{Denominator: config.DefaultDenominator, Weights: w}
}

// LargestRemainder splits denominator in proportion to weights (≥ 0, not all
// 0) into integers that sum exactly to denominator: each gets the floor of its
// exact share, and the leftover points go one each to the largest remainders,
// ties to the lower index.
func LargestRemainder(weights []int64, denominator int) []int {
	var total int64
	for _, w := range weights {
		total += w
	}
	out := make([]int, len(weights))
	if total <= 0 {
		return out
	}
	rem := make([]int64, len(weights))
	left := denominator
	for i, w := range weights {
		q := w * int64(denominator)
		out[i] = int(q / total)
		rem[i] = q % total
		left -= out[i]
	}
	idx := make([]int, len(weights))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rem[idx[a]] > rem[idx[b]] })
	for k := 0; k < left; k++ {
		out[idx[k%len(idx)]]++
	}
	return out
}

func drainedSet(s *config.State) map[string]map[string]bool {
	d := map[string]map[string]bool{}
	for _, dr := range s.Drains {
		if d[dr.Cluster] == nil {
			d[dr.Cluster] = map[string]bool{}
		}
		d[dr.Cluster][dr.SubCluster] = true
	}
	return d
}

func cloneInstances(in []config.Instance) []config.Instance {
	if in == nil {
		return nil
	}
	out := make([]config.Instance, len(in))
	for i, x := range in {
		x.Labels = maps.Clone(x.Labels)
		out[i] = x
	}
	return out
}

func clonePolicy(p config.Policy) config.Policy {
	p.Retry.OnStatus = slices.Clone(p.Retry.OnStatus)
	return p
}
