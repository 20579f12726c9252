package configwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// byteKV counts the bytes of every Get and Txn response (protobuf size:
// what etcd sends the proxy for its reads).
type byteKV struct {
	clientv3.KV
	bytes atomic.Int64
}

func (c *byteKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	r, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		c.bytes.Add(int64(proto.Size((*pb.RangeResponse)(r))))
	}
	return r, err
}

func (c *byteKV) Txn(ctx context.Context) clientv3.Txn { return &byteTxn{Txn: c.KV.Txn(ctx), c: c} }

type byteTxn struct {
	clientv3.Txn
	c *byteKV
}

func (t *byteTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *byteTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *byteTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *byteTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.Txn.Commit()
	if err == nil {
		t.c.bytes.Add(int64(proto.Size((*pb.TxnResponse)(r))))
	}
	return r, err
}

// fanoutSnapshot has clusters backend clusters of 2 sub-clusters × perSub
// instances; cluster c's SC1 weight is w[c] when set.
func fanoutSnapshot(version uint64, clusters, perSub int, w map[int]int) *snapshot.Snapshot {
	s := testSnapshot(1)
	s.Meta.Version, s.Meta.Parent = version, version-1
	// A scheduler's meta (intents aside): lineage, author, reason.
	s.Meta.Lineage, s.Meta.Author, s.Meta.Reason = "20261201T143603Z-0f5b0ae7", "lbscheduler/S1", "inputs changed: demand"
	for c := range clusters {
		cl := snapshot.Cluster{SubClusters: map[string]config.SubCluster{}, Policy: config.DefaultPolicy(),
			Row: snapshot.Row{Denominator: 10000, Weights: map[string]int{"SC1": 4500, "SC2": 4500, config.Blackhole: 1000}}}
		if w, ok := w[c]; ok {
			cl.Row.Weights = map[string]int{"SC1": w, "SC2": 9000 - w, config.Blackhole: 1000}
		}
		for sc := 1; sc <= 2; sc++ {
			sub := config.SubCluster{IDC: fmt.Sprintf("IDC%d", sc)}
			for i := range perSub {
				sub.Instances = append(sub.Instances, config.Instance{
					Addr: fmt.Sprintf("10.%d.%d.%d", c/250, c%250, sc*50+i), Port: 8000 + i, Weight: 10,
					Labels: map[string]string{"host": fmt.Sprintf("bc%03d-sc%d-h%02d", c, sc, i)},
				})
			}
			cl.SubClusters[fmt.Sprintf("SC%d", sc)] = sub
		}
		s.Clusters[fmt.Sprintf("backend-%03d", c)] = cl
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

// BenchmarkFanoutBytes: the bytes one proxy reads from etcd for a
// one-cluster change at 200 backend clusters (2 sub-clusters × 5 or 25
// instances each), whole layout (snapshot.Encode) against the split one
// (snapshot.EncodeStore): the watch event's pointer plus every Get and Txn
// response, counted by a KV wrapper around the real configwatch's client.
// It also reports the totals for 100 and 5 000 proxies (×N: each proxy
// reads the same).
// Run: go test -run '^$' -bench FanoutBytes -benchtime 40x ./internal/configwatch/
func BenchmarkFanoutBytes(b *testing.B) {
	for _, perSub := range []int{5, 25} {
		for _, layout := range []string{"whole", "split", "push"} {
			b.Run(fmt.Sprintf("instances=%d/layout=%s", 2*perSub, layout), func(b *testing.B) { benchFanout(b, layout, 200, perSub) })
		}
	}
}

// fanoutPublisher publishes under lay as the scheduler does: the parts
// etcd lacks (it remembers what it wrote), then the manifest and the
// pointer in one transaction. layout is "whole" (snapshot.Encode), "split"
// (snapshot.EncodeStore, the pointer without a push: the previous release)
// or "push" (EncodeStore and the pointer carries snapshot.NewPush of the
// parts written).
type fanoutPublisher struct {
	cli     *clientv3.Client
	lay     keys.Layout
	layout  string
	written map[string]bool
}

// publish returns the pointer's size and when the pointer transaction began.
func (f *fanoutPublisher) publish(b *testing.B, s *snapshot.Snapshot) (int, time.Time) {
	enc := snapshot.Encode
	if f.layout != "whole" {
		enc = snapshot.EncodeStore
	}
	m, parts, err := enc(s)
	if err != nil {
		b.Fatal(err)
	}
	if f.written == nil {
		f.written = map[string]bool{}
	}
	ctx := context.Background()
	var fresh []snapshot.Part
	for _, p := range parts {
		if !f.written[p.Digest] {
			f.written[p.Digest] = true
			fresh = append(fresh, p)
			k, _ := f.lay.Part(p.Digest)
			if _, err := f.cli.Put(ctx, k, string(p.Data)); err != nil {
				b.Fatal(err)
			}
		}
	}
	mraw, _ := json.Marshal(m)
	ptr := pointerOf(s)
	if f.layout == "push" {
		if ptr.Push, err = snapshot.NewPush(m, fresh); err != nil {
			b.Fatal(err)
		}
	}
	praw, _ := json.Marshal(ptr)
	mk, _ := f.lay.Snapshot(pc, s.Meta.Version)
	ck, _ := f.lay.Current(pc)
	t0 := time.Now()
	if _, err := f.cli.Txn(ctx).Then(clientv3.OpPut(mk, string(mraw)), clientv3.OpPut(ck, string(praw))).Commit(); err != nil {
		b.Fatal(err)
	}
	return len(praw), t0
}

func benchFanout(b *testing.B, lay string, clusters, perSub int) {
	_, cli := etcdtest.New(b)
	f := &fanoutPublisher{cli: cli, lay: layout, layout: lay}
	pub := func(s *snapshot.Snapshot) int { n, _ := f.publish(b, s); return n }
	weights := map[int]int{}
	pub(fanoutSnapshot(1, clusters, perSub, weights))
	wcli := newClient(b, cli.Endpoints()...)
	kv := &byteKV{KV: wcli.KV}
	wcli.KV = kv
	rec := newRecorder()
	rec.notify = make(chan uint64, 1)
	w := start(b, Config{Client: wcli, Apply: rec.apply, StoreCheckInterval: time.Hour})
	wait := func(v uint64) {
		for {
			select {
			case got := <-rec.notify:
				if got == v {
					return
				}
			case <-time.After(30 * time.Second):
				b.Fatalf("v%d not applied within 30s", v)
			}
		}
	}
	wait(1)
	var total int64
	reads := w.Status().SnapshotReads
	b.ResetTimer()
	for i := range b.N {
		v := uint64(i + 2)
		before := kv.bytes.Load()
		weights[i%clusters] = 3000 + i%2*1000 + i%7 // one cluster changes
		ptrBytes := pub(fanoutSnapshot(v, clusters, perSub, weights))
		wait(v)
		total += kv.bytes.Load() - before + int64(ptrBytes)
	}
	b.StopTimer()
	per := float64(total) / float64(b.N)
	b.ReportMetric(float64(w.Status().SnapshotReads-reads)/float64(b.N), "reads/change")
	b.ReportMetric(per, "B/proxy")
	b.ReportMetric(per*100/1024, "KiB/100proxies")
	b.ReportMetric(per*5000/(1<<20), "MiB/5000proxies")
	m, _, _ := snapshot.Encode(fanoutSnapshot(1, clusters, perSub, nil))
	b.ReportMetric(float64(m.Size), "whole-gz-B")
}
