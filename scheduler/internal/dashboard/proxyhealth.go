package dashboard

import (
	"github.com/sluicelb/sluice/api/report"
)

// ProxiesView is how the live proxies see one instance, from the instance
// lists of their demand reports (report.ProxyInstance): the dashboard asks
// no proxy's admin API, so a page view costs the fleet nothing.
type ProxiesView struct {
	// State sums it up: "ejected" when a proxy sees it CHECKING or DOWN,
	// else "drained" when a proxy's override drains it, else "slow start"
	// when a proxy ramps it, else "unavailable" when a proxy may not pick it
	// (excluded), else "healthy".
	State string `json:"state"`
	// Reporting is how many proxies have it in their table; the others
	// count how many of those see it so.
	Reporting   int `json:"reporting"`
	Ejected     int `json:"ejected"`
	Drained     int `json:"drained"`
	SlowStart   int `json:"slow_start"`
	Unavailable int `json:"unavailable"`
	// SlowStartMin is the least slow-start progress (0.01 to 1) among the
	// proxies ramping it.
	SlowStartMin float64 `json:"slow_start_min,omitempty"`
	// InFlight is the requests in flight to it, summed over the proxies, as
	// of the last traffic sample (every 5 s: load moves all the time, the
	// document should not).
	InFlight int64 `json:"in_flight"`
	// Detail names each proxy that does not see it healthy, e.g.
	// "BFE1/p1 CHECKING" (at most maxDetail).
	Detail []string `json:"detail,omitempty"`
}

// maxDetail bounds ProxiesView.Detail.
const maxDetail = 10

type instKey struct{ cluster, sub, addr string }

// proxiesViews sums the demand reports' instance lists per instance;
// inflight holds the sampled in-flight sums.
func proxiesViews(reports map[string]report.Demand, inflight map[instKey]int64) map[instKey]*ProxiesView {
	out := map[instKey]*ProxiesView{}
	for _, k := range sortedKeys(reports) {
		d := reports[k]
		for _, pi := range d.Instances {
			ik := instKey{pi.Cluster, pi.SubCluster, pi.Addr}
			v := out[ik]
			if v == nil {
				v = &ProxiesView{InFlight: inflight[ik]}
				out[ik] = v
			}
			v.Reporting++
			word := ""
			switch {
			case pi.Health == report.ProxyHealthChecking || pi.Health == report.ProxyHealthDown:
				v.Ejected++
				word = pi.Health
			case pi.Drained:
				v.Drained++
				word = "drained by override"
			case pi.SlowStart > 0:
				v.SlowStart++
				if v.SlowStartMin == 0 || pi.SlowStart < v.SlowStartMin {
					v.SlowStartMin = pi.SlowStart
				}
				word = "slow start " + itoa(int(100*pi.SlowStart)) + "%"
			}
			if !pi.Available {
				v.Unavailable++
				if word == "" {
					word = "unavailable"
					if pi.Excluded {
						word = "excluded"
					}
				}
			}
			if word != "" && len(v.Detail) < maxDetail {
				v.Detail = append(v.Detail, d.ProxyCluster+"/"+d.ID+" "+word)
			}
		}
	}
	for _, v := range out {
		switch {
		case v.Ejected > 0:
			v.State = "ejected"
		case v.Drained > 0:
			v.State = "drained"
		case v.SlowStart > 0:
			v.State = "slow start"
		case v.Unavailable > 0:
			v.State = "unavailable"
		default:
			v.State = "healthy"
		}
	}
	return out
}

// inflightSums sums the in-flight counts of the demand reports per instance.
func inflightSums(reports map[string]report.Demand) map[instKey]int64 {
	out := map[instKey]int64{}
	for _, d := range reports {
		for _, pi := range d.Instances {
			out[instKey{pi.Cluster, pi.SubCluster, pi.Addr}] += pi.InFlight
		}
	}
	return out
}
