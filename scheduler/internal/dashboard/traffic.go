package dashboard

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
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
}

type seriesKey struct{ pc, cluster string }

// traffic keeps the demand reports and the sampled series (under
// Dashboard.mu).
type traffic struct {
	reports map[string]report.Demand
	series  map[seriesKey][]TrafficPoint
	keep    int
}

// sampleLocked appends one point per (proxy cluster, cluster) reported now,
// dropping points beyond the window; a pair nobody reports any more keeps
// its points until they age out.
func (tr *traffic) sampleLocked(now time.Time) {
	sum := map[seriesKey]TrafficPoint{}
	for _, d := range tr.reports {
		for c, cd := range d.Clusters {
			k := seriesKey{d.ProxyCluster, c}
			p := sum[k]
			p.RPS += cd.RPS
			p.ErrorRPS += cd.ErrorRPS
			p.BlackholeRPS += cd.BlackholeRPS
			sum[k] = p
		}
	}
	t := now.Unix()
	cutoff := t - int64(tr.keep)*int64(sampleEvery/time.Second)
	for k, p := range sum {
		p.T = t
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
			r.ProxyCluster = pk.ProxyCluster
			d.tr.reports[string(kv.Key)] = r
		},
	}
}
