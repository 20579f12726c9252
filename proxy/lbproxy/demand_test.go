package lbproxy

import (
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/proxy/server"
)

// The demand report carries the window's traffic: the difference of the
// cumulative counters with the sample one window old.
func TestDemandMeterTraffic(t *testing.T) {
	now := time.Unix(1700000000, 0)
	var cur server.Counts
	m := &demandMeter{window: 10 * time.Second, now: func() time.Time { return now },
		counts: func() map[string]server.Counts { return map[string]server.Counts{"c": cur} }}
	cur = server.Counts{Requests: 10, Traffic: report.TrafficCounts{
		SubClusters: map[string]uint64{"SC1": 8, "GSLB_BLACKHOLE": 2}, Codes: [6]uint64{0, 0, 8, 0, 0, 2}}}
	if out, _ := m.rates(); out["c"].Traffic != nil {
		t.Fatalf("first sample has no window yet: %+v", out["c"].Traffic)
	}
	now = now.Add(10 * time.Second)
	cur = server.Counts{Requests: 30, Traffic: report.TrafficCounts{
		SubClusters: map[string]uint64{"SC1": 20, "GSLB_BLACKHOLE": 10}, Codes: [6]uint64{0, 0, 20, 0, 0, 10}}}
	cur.Traffic.Latency[0] = 20
	out, secs := m.rates()
	tr := out["c"].Traffic
	if secs != 10 || tr == nil || tr.Requests != 20 || tr.SubClusters["SC1"] != 12 || tr.SubClusters["GSLB_BLACKHOLE"] != 8 ||
		tr.Status.S5xx != 8 || tr.Share("GSLB_BLACKHOLE") != 40 {
		t.Fatalf("window %vs traffic %+v, want 20 answers, SC1 12, blackhole 8 (40 %%)", secs, tr)
	}
}
