package configwatch

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// BenchmarkPublishToApply measures the time from the start of a
// scheduler-style publish (manifest + pointer in one txn, committed with
// etcd's fsync) to Apply being called for that version, one publish at a time, one watcher, embedded etcd on loopback.
// Run: go test -run '^$' -bench PublishToApply -benchtime 200x -benchmem ./configwatch/
func BenchmarkPublishToApply(b *testing.B) {
	_, cli := etcdtest.New(b)
	rec := newRecorder()
	rec.notify = make(chan uint64, 1)
	publish(b, cli, testSnapshot(1))
	start(b, Config{Client: newClient(b, cli.Endpoints()...), Apply: rec.apply})
	select {
	case <-rec.notify:
	case <-time.After(20 * time.Second):
		b.Fatal("v1 not applied")
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := uint64(i + 2)
		s := testSnapshot(v)
		t0 := time.Now()
		publish(b, cli, s)
		select {
		case got := <-rec.notify:
			if got != v {
				b.Fatalf("applied v%d, want v%d", got, v)
			}
		case <-time.After(20 * time.Second):
			b.Fatalf("v%d not applied within 20s", v)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
