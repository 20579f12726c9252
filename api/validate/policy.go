package validate

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/policy"
	"github.com/sluicelb/sluice/api/statusmatch"
)

// Bounds that are not fields of config. They are documented in docs/config.md.
const (
	MaxRetry          = 10
	MaxReplayBody     = 64 << 20
	MaxHealthCount    = 100
	MaxDuration       = time.Hour
	MaxConnectTimeout = time.Minute
	MaxRandomChoices  = policy.MaxRandomChoices
	MaxBoundedLoad    = 1000
	MaxHistory        = 10000
)

// inRange adds "v is outside lo..hi" when v is not in lo..hi.
func (c *collector) inRange(path string, v, lo, hi int) {
	if v < lo || v > hi {
		c.add(path, "%d is outside %d..%d", v, lo, hi)
	}
}

func (c *collector) atLeast(path string, v, lo int) {
	if v < lo {
		c.add(path, "%d is less than %d", v, lo)
	}
}

// duration checks lo < d ≤ max (positive) or 0 ≤ d ≤ max.
func (c *collector) duration(path string, d config.Duration, positive bool, max time.Duration) {
	switch {
	case positive && d <= 0:
		c.add(path, "%s must be greater than 0", d)
	case d < 0:
		c.add(path, "%s must not be negative", d)
	case d.D() > max:
		c.add(path, "%s is longer than %s", d, max)
	}
}

func (c *collector) name(path, kind, n string) {
	if err := keys.ValidName(n); err != nil {
		c.add(path, "%s %v", kind, err)
	}
}

func (c *collector) oneOf(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.add(path, "%q is not one of %s", v, strings.Join(allowed, ", "))
}

// parsed reports a policy parser's error at path.
func (c *collector) parsed(path string, err error) {
	if err != nil {
		c.add(path, "%v", err)
	}
}

// policy checks a cluster policy at path (e.g. clusters.demo-main.policy).
func (c *collector) policy(path string, p config.Policy) {
	b := p.Balance
	bp := path + ".balance"
	_, err := policy.ParseMode(b.SubclusterMode)
	c.parsed(bp+".subcluster_mode", err)
	_, err = policy.ParseInstance(b.Instance)
	c.parsed(bp+".instance", err)
	key, err := policy.ParseKey(b.Hash.Key)
	c.parsed(bp+".hash.key", err)
	if err == nil && key.NeedsHeader() && b.Hash.Header == "" {
		c.add(bp+".hash.header", "is empty; hash key %q needs a header name (or \"Cookie:NAME\")", b.Hash.Key)
	}
	if b.Hash.Header != "" {
		c.hashHeader(bp+".hash.header", b.Hash.Header)
	}
	_, err = policy.ParseHashType(b.HashType)
	c.parsed(bp+".hash_type", err)
	if b.BoundedLoadPercent != 0 && (b.BoundedLoadPercent < 100 || b.BoundedLoadPercent > MaxBoundedLoad) {
		c.add(bp+".bounded_load_percent", "%d is neither 0 (off) nor in 100..%d", b.BoundedLoadPercent, MaxBoundedLoad)
	}
	if b.StickyCookie != "" && !httpguts.ValidHeaderFieldName(b.StickyCookie) {
		c.add(bp+".sticky_cookie", "%q is not a valid cookie name (an HTTP token)", b.StickyCookie)
	} else if b.StickyCookie == "" && b.Instance == config.InstanceStickyCookie {
		c.add(bp+".sticky_cookie", "is empty; instance mode sticky-cookie needs a cookie name")
	}

	r := p.Retry
	rp := path + ".retry"
	c.inRange(rp+".retry_max", r.RetryMax, 0, MaxRetry)
	c.inRange(rp+".cross_retry", r.CrossRetry, 0, MaxRetry)
	c.inRange(rp+".budget_percent", r.BudgetPercent, 0, 100)
	c.atLeast(rp+".budget_min", r.BudgetMin, 0)
	if r.MaxReplayBody < 0 || r.MaxReplayBody > MaxReplayBody {
		c.add(rp+".max_replay_body", "%d is outside 0..%d (64 MiB)", r.MaxReplayBody, MaxReplayBody)
	}
	for i, s := range r.OnStatus {
		c.inRange(fmt.Sprintf("%s.on_status[%d]", rp, i), s, 100, 599)
	}

	h := p.Health
	hp := path + ".health"
	c.inRange(hp+".fail_num", h.FailNum, 1, MaxHealthCount)
	c.inRange(hp+".succ_num", h.SuccNum, 1, MaxHealthCount)
	c.inRange(hp+".rise", h.Rise, 1, MaxHealthCount)
	c.inRange(hp+".fall", h.Fall, 1, MaxHealthCount)
	c.duration(hp+".check_interval", h.CheckInterval, true, MaxDuration)
	c.duration(hp+".interval", h.Interval, true, MaxDuration)
	c.duration(hp+".timeout", h.Timeout, true, MaxDuration)
	c.oneOf(hp+".probe.scheme", h.Probe.Scheme, "http", "https", "tcp", "tls")
	if h.Probe.Scheme == "http" || h.Probe.Scheme == "https" {
		if h.Probe.Path != "" && !strings.HasPrefix(h.Probe.Path, "/") {
			c.add(hp+".probe.path", "%q must start with \"/\"", h.Probe.Path)
		}
		if h.Probe.Status == "" {
			c.add(hp+".probe.status", "is empty; an %s probe needs the statuses that count as success, e.g. \"2xx\"", h.Probe.Scheme)
		}
	}
	if h.Probe.Status != "" {
		if _, err := statusmatch.Parse(h.Probe.Status); err != nil {
			c.add(hp+".probe.status", "%v", err)
		}
	}
	if h.OutlierStatus != "" {
		if _, err := statusmatch.Parse(h.OutlierStatus); err != nil {
			c.add(hp+".outlier_status", "%v", err)
		}
	}
	c.inRange(hp+".panic_percent", h.PanicPercent, 0, 100)
	c.inRange(hp+".max_ejection_percent", h.MaxEjectionPercent, 0, 100)

	pl := p.Pool
	pp := path + ".pool"
	c.atLeast(pp+".max_idle_conns_per_host", pl.MaxIdleConnsPerHost, 0)
	c.atLeast(pp+".max_conns_per_host", pl.MaxConnsPerHost, 0)
	c.duration(pp+".queue_timeout", pl.QueueTimeout, false, MaxDuration)
	c.duration(pp+".idle_timeout", pl.IdleTimeout, false, MaxDuration)

	t := p.Timeouts
	tp := path + ".timeouts"
	c.duration(tp+".connect", t.Connect, true, MaxConnectTimeout)
	c.duration(tp+".response_header", t.ResponseHeader, true, MaxDuration)
	c.duration(tp+".per_try", t.PerTry, false, MaxDuration)
	c.duration(tp+".request", t.Request, false, MaxDuration)
	c.duration(tp+".read_client", t.ReadClient, true, MaxDuration)
	c.duration(tp+".write_client", t.WriteClient, true, MaxDuration)
	if t.PerTry > 0 && t.Request > 0 && t.PerTry > t.Request {
		c.add(tp+".per_try", "%s is longer than timeouts.request %s", t.PerTry, t.Request)
	}

	c.duration(path+".slow_start.window", p.SlowStart.Window, false, MaxDuration)
	c.inRange(path+".slow_start.floor_percent", p.SlowStart.FloorPercent, 1, 100)

	c.inRange(path+".blackhole.status", p.Blackhole.Status, 200, 599)
	c.duration(path+".blackhole.retry_after", p.Blackhole.RetryAfter, false, MaxDuration)
	c.inRange(path+".blackhole.max_percent", p.Blackhole.MaxPercent, 0, 100)
}

func (c *collector) hashHeader(path, h string) {
	if name, ok := strings.CutPrefix(h, "Cookie:"); ok {
		if !httpguts.ValidHeaderFieldName(name) {
			c.add(path, "%q: cookie name %q is not an HTTP token", h, name)
		}
		return
	}
	if !httpguts.ValidHeaderFieldName(h) {
		c.add(path, "%q is not a header name (an HTTP token) or \"Cookie:NAME\"", h)
	}
}

// subClusters checks the sub-clusters of one cluster and their instances.
// idcOK reports whether an IDC name is known (nil: only syntax is checked).
func (c *collector) subClusters(path string, scs map[string]config.SubCluster, idcOK func(string) bool) {
	if len(scs) == 0 {
		c.add(path, "is empty; a cluster needs at least one sub-cluster")
	}
	for _, name := range sortedKeys(scs) {
		sc := scs[name]
		sp := path + "." + name
		if name == config.Blackhole {
			c.add(sp, "%s is reserved for the dropped share of a row and cannot be a sub-cluster", config.Blackhole)
		} else {
			c.name(sp, "sub-cluster", name)
		}
		switch {
		case sc.IDC == "" && idcOK != nil:
			c.add(sp+".idc", "is empty; want one of topology.idcs")
		case sc.IDC != "" && idcOK != nil && !idcOK(sc.IDC):
			c.add(sp+".idc", "IDC %q is not in topology.idcs", sc.IDC)
		case sc.IDC != "":
			c.name(sp+".idc", "IDC", sc.IDC)
		}
		seen := map[netip.AddrPort]int{}
		for i, in := range sc.Instances {
			ip := fmt.Sprintf("%s.instances[%d]", sp, i)
			addr, err := netip.ParseAddr(in.Addr)
			if err != nil {
				c.add(ip+".addr", "%q is not an IP address", in.Addr)
			}
			c.inRange(ip+".port", in.Port, 1, 65535)
			c.inRange(ip+".weight", in.Weight, 0, config.MaxInstanceWeight)
			c.atLeast(ip+".capacity_rps", in.CapacityRPS, 0)
			c.oneOf(ip+".state", in.State, "", config.StateHealthy, config.StateUnhealthy, config.StateDraining)
			if err == nil && in.Port >= 1 && in.Port <= 65535 {
				ap := netip.AddrPortFrom(addr.Unmap(), uint16(in.Port))
				if j, dup := seen[ap]; dup {
					c.add(ip, "%s duplicates instances[%d]", ap, j)
				} else {
					seen[ap] = i
				}
			}
		}
	}
}

// row checks a weight row: integers ≥ 0 over existing sub-clusters and
// GSLB_BLACKHOLE, summing exactly to denom, a full drop only when allowed.
func (c *collector) row(path string, weights map[string]int, denom int, allowFullDrop bool, subClusterOK func(string) bool, excluded func(string) bool) {
	if len(weights) == 0 {
		c.add(path, "is empty; want weights over the sub-clusters (and %s) summing to %d", config.Blackhole, denom)
		return
	}
	sum := 0
	overflow := false
	for _, k := range sortedKeys(weights) {
		w := weights[k]
		wp := path + "." + k
		if k != config.Blackhole && subClusterOK != nil && !subClusterOK(k) {
			c.add(wp, "sub-cluster %q does not exist in the cluster", k)
		}
		if w < 0 {
			c.add(wp, "%d is negative; weights are integers ≥ 0", w)
			continue
		}
		if w > denom {
			overflow = true
			c.add(wp, "%d is larger than the row's total %d", w, denom)
			continue
		}
		if k == config.Blackhole && w == denom && !allowFullDrop {
			c.add(wp, "%d drops all traffic; set allow_full_drop to allow it", w)
		}
		if excluded != nil && w > 0 && excluded(k) {
			c.add(wp, "%d gives traffic to sub-cluster %q, which is excluded", w, k)
		}
		sum += w
	}
	if !overflow && sum != denom {
		if sum == 0 {
			c.add(path, "every weight is 0; want weights summing to %d", denom)
		} else {
			c.add(path, "weights sum to %d, want exactly %d", sum, denom)
		}
	}
}

func (c *collector) trustedProxies(path string, cidrs []string) {
	for i, s := range cidrs {
		if _, err := netip.ParsePrefix(s); err != nil {
			c.add(fmt.Sprintf("%s[%d]", path, i), "%q is not a CIDR like 10.0.0.0/8 or fd00::/8", s)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
