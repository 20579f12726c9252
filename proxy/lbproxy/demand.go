package lbproxy

import (
	"sync"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/proxy/server"
)

// demandMeter turns the server's cumulative per-cluster counters into rates
// and traffic counts (report.Traffic) over a sliding window of at least
// Window: it keeps the samples it took at each call and compares with the
// newest one that is Window old.
type demandMeter struct {
	window time.Duration
	now    func() time.Time
	counts func() map[string]server.Counts

	mu      sync.Mutex
	samples []demandSample
}

type demandSample struct {
	at     time.Time
	counts map[string]server.Counts
}

func (m *demandMeter) rates() (map[string]report.ClusterDemand, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	cur := demandSample{at: now, counts: m.counts()}
	// Keep the newest sample that is at least window old, and everything newer.
	base := -1
	for i, s := range m.samples {
		if now.Sub(s.at) >= m.window {
			base = i
		}
	}
	if base > 0 {
		m.samples = m.samples[base:]
		base = 0
	}
	out := make(map[string]report.ClusterDemand, len(cur.counts))
	var secs float64
	if len(m.samples) > 0 {
		ref := m.samples[0]
		secs = now.Sub(ref.at).Seconds()
		if secs > 0 {
			for name, c := range cur.counts {
				p := ref.counts[name]
				if c.Requests < p.Requests { // cluster re-created: its counters restarted
					p = server.Counts{}
				}
				tr := c.Traffic.Since(p.Traffic)
				out[name] = report.ClusterDemand{
					RPS:          float64(c.Requests-p.Requests) / secs,
					ErrorRPS:     float64(sub(c.Errors, p.Errors)) / secs,
					BlackholeRPS: float64(sub(c.Blackhole, p.Blackhole)) / secs,
					Traffic:      &tr,
				}
			}
		}
	}
	for name := range cur.counts {
		if _, ok := out[name]; !ok {
			out[name] = report.ClusterDemand{}
		}
	}
	m.samples = append(m.samples, cur)
	return out, secs
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}
