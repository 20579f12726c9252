package report

import (
	"math"
	"time"
)

// LatencyBoundsMs are the upper bounds, in milliseconds, of the latency
// histogram of a traffic report; the last bucket (LatencyBuckets-1) counts
// everything slower than the last bound. Fixed, so that reports of every
// proxy add up bucket by bucket.
var LatencyBoundsMs = [LatencyBuckets - 1]float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

// LatencyBuckets is the number of buckets of the latency histogram.
const LatencyBuckets = 14

var latencyBounds = func() (b [LatencyBuckets - 1]time.Duration) {
	for i, ms := range LatencyBoundsMs {
		b[i] = time.Duration(ms * float64(time.Millisecond))
	}
	return b
}()

// LatencyBucket is the histogram bucket of a request that took d.
func LatencyBucket(d time.Duration) int {
	for i, b := range latencyBounds {
		if d <= b {
			return i
		}
	}
	return LatencyBuckets - 1
}

// Traffic is what one proxy answered for one cluster over the report window
// (Demand.WindowSeconds): counts, not rates, so that ratios can be judged
// with their sample size. Every answer is counted once in Status and once in
// LatencyMs; it is in SubClusters when a sub-cluster was picked for it
// (GSLB_BLACKHOLE for the blackhole share's drops).
type Traffic struct {
	// Requests is the number of answers in the window (the sum of Status).
	Requests uint64 `json:"requests"`
	// SubClusters counts answers by the sub-cluster of the last attempt,
	// GSLB_BLACKHOLE included: divided by their sum, the realised share.
	SubClusters map[string]uint64 `json:"subclusters,omitempty"`
	// Status counts answers by status class.
	Status StatusCounts `json:"status"`
	// GeneratedErrors counts 5xx answers the proxy generated itself (no
	// backend, timeouts, ...), blackhole drops excepted; they are also in
	// Status.S5xx.
	GeneratedErrors uint64 `json:"generated_errors,omitempty"`
	// LatencyMs counts answers by duration, one count per bucket of
	// LatencyBoundsMs plus the overflow bucket (LatencyBuckets entries).
	LatencyMs []uint64 `json:"latency_ms_buckets,omitempty"`
	// P99Ms is the 99th percentile of LatencyMs (the bucket's upper bound;
	// 0 without answers).
	P99Ms float64 `json:"p99_ms,omitempty"`
}

// StatusCounts are answers by status class; None: no status (the client
// left before any).
type StatusCounts struct {
	S1xx uint64 `json:"1xx,omitempty"`
	S2xx uint64 `json:"2xx"`
	S3xx uint64 `json:"3xx,omitempty"`
	S4xx uint64 `json:"4xx"`
	S5xx uint64 `json:"5xx"`
	None uint64 `json:"none,omitempty"`
}

// Share is the realised share of sub-cluster sub, in points (0-100), over
// the answers that picked a sub-cluster; 0 when none did.
func (t Traffic) Share(sub string) float64 {
	var all uint64
	for _, n := range t.SubClusters {
		all += n
	}
	if all == 0 {
		return 0
	}
	return 100 * float64(t.SubClusters[sub]) / float64(all)
}

// Add adds o into t (to judge several proxies together); P99Ms is
// recomputed.
func (t *Traffic) Add(o Traffic) {
	t.Requests += o.Requests
	if len(o.SubClusters) > 0 && t.SubClusters == nil {
		t.SubClusters = make(map[string]uint64, len(o.SubClusters))
	}
	for s, n := range o.SubClusters {
		t.SubClusters[s] += n
	}
	t.Status.S1xx += o.Status.S1xx
	t.Status.S2xx += o.Status.S2xx
	t.Status.S3xx += o.Status.S3xx
	t.Status.S4xx += o.Status.S4xx
	t.Status.S5xx += o.Status.S5xx
	t.Status.None += o.Status.None
	t.GeneratedErrors += o.GeneratedErrors
	if len(o.LatencyMs) > 0 && len(t.LatencyMs) < LatencyBuckets {
		t.LatencyMs = append(t.LatencyMs, make([]uint64, LatencyBuckets-len(t.LatencyMs))...)
	}
	for i, n := range o.LatencyMs {
		if i < LatencyBuckets {
			t.LatencyMs[i] += n
		}
	}
	t.P99Ms = t.Quantile(0.99)
}

// Quantile is the q quantile (0 < q ≤ 1) of LatencyMs in milliseconds: the
// upper bound of the bucket holding it, OverflowMs for the overflow bucket,
// 0 without answers.
func (t Traffic) Quantile(q float64) float64 {
	var all uint64
	for _, n := range t.LatencyMs {
		all += n
	}
	if all == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(all)))
	var seen uint64
	for i, n := range t.LatencyMs {
		seen += n
		if seen >= rank {
			if i < len(LatencyBoundsMs) {
				return LatencyBoundsMs[i]
			}
			break
		}
	}
	return OverflowMs
}

// OverflowMs stands for "slower than the last bound" in a quantile (JSON has
// no infinity): twice the last bound.
const OverflowMs = 20000

// TrafficCounts are a proxy's cumulative counters of one cluster since it
// started (or since the cluster entered its table); two of them make a
// Traffic.
type TrafficCounts struct {
	SubClusters map[string]uint64
	Codes       [6]uint64 // index status/100; 0: no status
	Generated   uint64
	Latency     [LatencyBuckets]uint64
}

// Since is the traffic between prev and c. A counter below prev's (the
// cluster left the table and came back) counts from zero.
func (c TrafficCounts) Since(prev TrafficCounts) Traffic {
	d := func(a, b uint64) uint64 {
		if a < b {
			return a
		}
		return a - b
	}
	t := Traffic{
		Status: StatusCounts{
			None: d(c.Codes[0], prev.Codes[0]), S1xx: d(c.Codes[1], prev.Codes[1]),
			S2xx: d(c.Codes[2], prev.Codes[2]), S3xx: d(c.Codes[3], prev.Codes[3]),
			S4xx: d(c.Codes[4], prev.Codes[4]), S5xx: d(c.Codes[5], prev.Codes[5]),
		},
		GeneratedErrors: d(c.Generated, prev.Generated),
		LatencyMs:       make([]uint64, LatencyBuckets),
	}
	if len(c.SubClusters) > 0 {
		t.SubClusters = make(map[string]uint64, len(c.SubClusters))
		for s, n := range c.SubClusters {
			t.SubClusters[s] = d(n, prev.SubClusters[s])
		}
	}
	for i := range c.Latency {
		t.LatencyMs[i] = d(c.Latency[i], prev.Latency[i])
	}
	st := t.Status
	t.Requests = st.None + st.S1xx + st.S2xx + st.S3xx + st.S4xx + st.S5xx
	t.P99Ms = t.Quantile(0.99)
	return t
}
