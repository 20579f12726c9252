package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLatencyBucket(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0}, {time.Millisecond, 0}, {time.Millisecond + 1, 1}, {3 * time.Millisecond, 2},
		{100 * time.Millisecond, 6}, {10 * time.Second, 12}, {11 * time.Second, 13}, {time.Hour, 13},
	} {
		if got := LatencyBucket(c.d); got != c.want {
			t.Errorf("LatencyBucket(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestTrafficSince(t *testing.T) {
	prev := TrafficCounts{SubClusters: map[string]uint64{"SC1": 10, "GSLB_BLACKHOLE": 2}, Codes: [6]uint64{0, 0, 9, 0, 1, 2}}
	prev.Latency[3] = 12
	cur := TrafficCounts{SubClusters: map[string]uint64{"SC1": 40, "SC2": 5, "GSLB_BLACKHOLE": 7},
		Codes: [6]uint64{1, 0, 30, 0, 1, 20}, Generated: 4}
	cur.Latency[3], cur.Latency[13] = 50, 2
	got := cur.Since(prev)
	want := Traffic{
		Requests:        1 + 21 + 18,
		SubClusters:     map[string]uint64{"SC1": 30, "SC2": 5, "GSLB_BLACKHOLE": 5},
		Status:          StatusCounts{None: 1, S2xx: 21, S5xx: 18},
		GeneratedErrors: 4,
		LatencyMs:       []uint64{0, 0, 0, 38, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
		P99Ms:           OverflowMs,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Since:\n got %+v\nwant %+v", got, want)
	}
	if s := got.Share("SC1"); s != 75 {
		t.Fatalf("Share(SC1) = %v, want 75", s)
	}
	// A counter that went back (the cluster left the table and came back)
	// counts from zero.
	if back := prev.Since(cur); back.SubClusters["SC1"] != 10 || back.Status.S2xx != 9 {
		t.Fatalf("counters restarted: %+v", back)
	}
}

func TestTrafficAddAndQuantile(t *testing.T) {
	var sum Traffic
	a := Traffic{Requests: 99, SubClusters: map[string]uint64{"SC1": 99}, Status: StatusCounts{S2xx: 99},
		LatencyMs: make([]uint64, LatencyBuckets)}
	a.LatencyMs[2] = 99 // ≤ 5 ms
	b := Traffic{Requests: 2, SubClusters: map[string]uint64{"SC2": 2}, Status: StatusCounts{S5xx: 2},
		LatencyMs: make([]uint64, LatencyBuckets)}
	b.LatencyMs[9] = 2 // ≤ 1000 ms
	sum.Add(a)
	if sum.P99Ms != 5 {
		t.Fatalf("p99 of a alone = %v, want 5", sum.P99Ms)
	}
	sum.Add(b)
	if sum.Requests != 101 || sum.Status.S5xx != 2 || sum.SubClusters["SC2"] != 2 || sum.P99Ms != 1000 {
		t.Fatalf("sum %+v, want 101 requests, 2 5xx, p99 1000 ms (rank 100 of 101)", sum)
	}
	if q := sum.Quantile(0.5); q != 5 {
		t.Fatalf("median %v, want 5", q)
	}
	if (Traffic{}).Quantile(0.99) != 0 || (Traffic{}).Share("SC1") != 0 {
		t.Fatal("an empty window has no quantile nor share")
	}
}

// Old readers ignore the new field; old reports decode with Traffic nil.
func TestDemandTrafficIsOptional(t *testing.T) {
	var d Demand
	if err := json.Unmarshal([]byte(`{"proxy_cluster":"BFE1","id":"p1","clusters":{"c":{"rps":2,"error_rps":0}},"window_seconds":10}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.Clusters["c"].Traffic != nil || d.Clusters["c"].RPS != 2 {
		t.Fatalf("old report decoded as %+v", d.Clusters["c"])
	}
	b, err := json.Marshal(ClusterDemand{RPS: 1})
	if err != nil || strings.Contains(string(b), "traffic") {
		t.Fatalf("a demand without traffic encodes as %s (%v)", b, err)
	}
	tr := Traffic{Requests: 1, Status: StatusCounts{S2xx: 1}, LatencyMs: make([]uint64, LatencyBuckets), P99Ms: OverflowMs}
	if _, err := json.Marshal(ClusterDemand{Traffic: &tr}); err != nil {
		t.Fatalf("overflow p99 must encode: %v", err)
	}
}
