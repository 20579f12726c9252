package dashboard

import (
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// TrafficSeries is one (proxy cluster, backend cluster)'s traffic over the
// kept window, summed over the proxy cluster's demand reports.
type TrafficSeries struct {
	ProxyCluster string         `json:"proxy_cluster"`
	Cluster      string         `json:"cluster"`
	Points       []TrafficPoint `json:"points"`
}

// TrafficPoint is one sample: requests/s, 5xx/s and blackhole drops/s.
type TrafficPoint struct {
	// T is the sample time, Unix seconds.
	T            int64   `json:"t"`
	RPS          float64 `json:"rps"`
	ErrorRPS     float64 `json:"error_rps"`
	BlackholeRPS float64 `json:"blackhole_rps"`
	// Answers is how many answers of the proxies' report windows picked a
	// sub-cluster (GSLB_BLACKHOLE included): the sample size of Realised.
	Answers uint64 `json:"answers,omitempty"`
	// Realised is the share of those answers per sub-cluster, in percent
	// (from the proxies' per-sub-cluster counts, report.Traffic); absent
	// when no proxy of the proxy cluster reports them.
	Realised map[string]float64 `json:"realised,omitempty"`
	// Intended is the row the scheduler computed for the pair at the
	// sample, in percent per sub-cluster (GSLB_BLACKHOLE included).
	Intended map[string]float64 `json:"intended,omitempty"`
}

type seriesKey struct{ pc, cluster string }

// traffic keeps the demand reports and the sampled series (under
// Dashboard.mu).
type traffic struct {
	reports map[string]report.Demand
	series  map[seriesKey][]TrafficPoint
	keep    int
	// inflight: the proxies' in-flight requests per instance at the last
	// sample (ProxiesView.InFlight).
	inflight map[instKey]int64
}

// sampleLocked appends one point per (proxy cluster, cluster) reported now,
// with the realised and the intended (rows: the computed rows) share per
// sub-cluster, dropping points beyond the window; a pair nobody reports any
// more keeps its points until they age out.
func (tr *traffic) sampleLocked(now time.Time, rows map[string]map[string]RowInput) {
	sum := map[seriesKey]TrafficPoint{}
	answers := map[seriesKey]*report.Traffic{}
	for _, k := range sortedKeys(tr.reports) {
		d := tr.reports[k]
		for c, cd := range d.Clusters {
			k := seriesKey{d.ProxyCluster, c}
			p := sum[k]
			p.RPS += cd.RPS
			p.ErrorRPS += cd.ErrorRPS
			p.BlackholeRPS += cd.BlackholeRPS
			sum[k] = p
			if cd.Traffic != nil {
				if answers[k] == nil {
					answers[k] = &report.Traffic{}
				}
				answers[k].Add(*cd.Traffic)
			}
		}
	}
	tr.inflight = inflightSums(tr.reports)
	t := now.Unix()
	cutoff := t - int64(tr.keep)*int64(sampleEvery/time.Second)
	for k, p := range sum {
		p.T = t
		p.Realised, p.Answers = realised(answers[k])
		if r, ok := rows[k.pc][k.cluster]; ok {
			p.Intended = intended(r.Row)
		}
		tr.series[k] = append(tr.series[k], p)
	}
	for k, pts := range tr.series {
		i := 0
		for i < len(pts) && pts[i].T <= cutoff {
			i++
		}
		if len(pts)-i > tr.keep {
			i = len(pts) - tr.keep
		}
		if i == len(pts) {
			delete(tr.series, k)
			continue
		}
		tr.series[k] = pts[i:]
	}
}

// realised is the share per sub-cluster of the answers that picked one, in
// percent, and how many did (nil, 0: none, or no per-sub-cluster counts).
func realised(tr *report.Traffic) (map[string]float64, uint64) {
	if tr == nil {
		return nil, 0
	}
	var n uint64
	for _, c := range tr.SubClusters {
		n += c
	}
	if n == 0 {
		return nil, 0
	}
	out := make(map[string]float64, len(tr.SubClusters))
	for s := range tr.SubClusters {
		out[s] = round2(tr.Share(s))
	}
	return out, n
}

// intended is a row's weights in percent of its denominator.
func intended(r snapshot.Row) map[string]float64 {
	if r.Denominator <= 0 {
		return nil
	}
	out := make(map[string]float64, len(r.Weights))
	for s, w := range r.Weights {
		out[s] = round2(100 * float64(w) / float64(r.Denominator))
	}
	return out
}

func round2(f float64) float64 { return math.Round(100*f) / 100 }

// listLocked returns the series sorted by proxy cluster, then cluster.
func (tr *traffic) listLocked() []TrafficSeries {
	byPC := map[string]map[string][]TrafficPoint{}
	for k, pts := range tr.series {
		if byPC[k.pc] == nil {
			byPC[k.pc] = map[string][]TrafficPoint{}
		}
		byPC[k.pc][k.cluster] = pts
	}
	out := []TrafficSeries{}
	for _, pc := range sortedKeys(byPC) {
		for _, c := range sortedKeys(byPC[pc]) {
			out = append(out, TrafficSeries{ProxyCluster: pc, Cluster: c, Points: append([]TrafficPoint(nil), byPC[pc][c]...)})
		}
	}
	return out
}

// sampleEvery and window: 15 minutes of 5-second samples.
const (
	sampleEvery = 5 * time.Second
	window      = 15 * time.Minute
)

// demandSink keeps the proxies' demand reports (demand/<pc>/<id>).
func (d *Dashboard) demandSink() *sink {
	return &sink{d: d,
		clear: func() { d.tr.reports = map[string]report.Demand{} },
		del:   func(key string) { delete(d.tr.reports, key) },
		put: func(kv *mvccpb.KeyValue) {
			pk, err := d.o.Layout.ParseDemand(string(kv.Key))
			var r report.Demand
			if err == nil {
				err = codec.UnmarshalJSON(kv.Value, &r)
			}
			if err != nil {
				d.o.Logger.Warn("dashboard: demand report ignored", "key", string(kv.Key), "err", err)
				delete(d.tr.reports, string(kv.Key))
				return
			}
			r.ProxyCluster, r.ID = pk.ProxyCluster, pk.ProxyID
			d.tr.reports[string(kv.Key)] = r
		},
	}
}
