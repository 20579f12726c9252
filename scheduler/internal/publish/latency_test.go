package publish

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// applier is a minimal proxy: it watches current/BFE1, takes the manifest
// the pointer carries or fetches it, decodes and validates the snapshot
// and reports the applied version.
func applier(ctx context.Context, b *testing.B, cli *clientv3.Client, applied chan<- uint64, ready *sync.WaitGroup) {
	ck, _ := layout.Current("BFE1")
	wch := cli.Watch(ctx, ck)
	ready.Done()
	for wr := range wch {
		for _, ev := range wr.Events {
			var ptr snapshot.Pointer
			if err := json.Unmarshal(ev.Kv.Value, &ptr); err != nil {
				b.Error(err)
				return
			}
			// The manifest comes with the pointer (snapshot.Push), as
			// configwatch takes it; else it is read.
			m, ok := ptr.Push.ManifestFor(ptr)
			if !ok {
				mk, _ := layout.Snapshot("BFE1", ptr.Version)
				r, err := cli.Get(ctx, mk)
				if err != nil || len(r.Kvs) == 0 {
					if ctx.Err() == nil {
						b.Errorf("manifest v%d: %v", ptr.Version, err)
					}
					return
				}
				if err := codec.UnmarshalJSON(r.Kvs[0].Value, &m); err != nil {
					b.Error(err)
					return
				}
			}
			s, err := snapshot.Decode(m, func(string) ([]byte, error) { return nil, snapshot.ErrMissingPart })
			if err == nil {
				err = validate.Snapshot(s)
			}
			if err != nil {
				b.Error(err)
				return
			}
			select {
			case applied <- s.Meta.Version:
			case <-ctx.Done():
				return
			}
		}
	}
}

// BenchmarkPublishToApplied measures one publish (read pointer, validate,
// encode, fenced txn) until all 10 watching proxies have fetched, decoded and
// validated the new snapshot. It reports p50/p99 in ms.
func BenchmarkPublishToApplied(b *testing.B) {
	srv, err := etcdtest.Start(etcdtest.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	cli, err := srv.Client()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := NewElector(cli, layout, "S1", 5*time.Second).Campaign(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Resign(context.Background())
	const proxies = 10
	applied := make(chan uint64, proxies*4)
	var ready, done sync.WaitGroup
	ready.Add(proxies)
	for range proxies {
		pc, err := srv.Client()
		if err != nil {
			b.Fatal(err)
		}
		defer pc.Close()
		done.Add(1)
		go func() { defer done.Done(); applier(ctx, b, pc, applied, &ready) }()
	}
	defer done.Wait()
	defer cancel()
	ready.Wait()
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	snaps := [2]*snapshot.Snapshot{snap(40, 0), snap(60, 0)}
	// Warm up: the watches must be established before timing.
	if _, err := p.Publish(ctx, l, snaps[0], "warm-up"); err != nil {
		b.Fatal(err)
	}
	for range proxies {
		<-applied
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		r, err := p.Publish(ctx, l, snaps[(i+1)%2], "bench")
		if err != nil {
			b.Fatal(err)
		}
		for n := 0; n < proxies; {
			if v := <-applied; v == r.Version {
				n++
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
}
