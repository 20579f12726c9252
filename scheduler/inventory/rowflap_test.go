package inventory

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/etcdwatch"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// pinnedDesired is the test's desired state with BFE1's demo-main row
// pinned to sc1/(90-sc1)/10.
func pinnedDesired(t *testing.T, sc1 int) string {
	t.Helper()
	pin := fmt.Sprintf(`"pins": [{"proxy_cluster": "BFE1", "cluster": "demo-main", "reason": "flap", "weights": {"SC1": %d, "SC2": %d, "GSLB_BLACKHOLE": 10}}],
  "scheduler":`, sc1, 90-sc1)
	return strings.Replace(desired, `"scheduler":`, pin, 1)
}

// pinSC1 is the SC1 weight of BFE1's pin in v (-1: no state or pin).
func pinSC1(v View) int {
	if v.State == nil || len(v.State.Pins) == 0 {
		return -1
	}
	return v.State.Pins[0].Weights["SC1"]
}

// The desired input's sink through a flap of rows, a store_replaced restart
// (the false verdict of the row-flap CI run) and the relist that follows
// it, then the final row: every row is taken, with a new generation for
// demo-main and a notification, and the relist drops nothing the dead round
// had not delivered.
func TestDesiredSinkThroughAStoreReplacedRelist(t *testing.T) {
	inv := New(nil, layout, Options{Now: time.Now})
	s := inv.sink(inDesired)
	kv := func(rev int64, sc1 int) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(layout.Desired()), Value: []byte(pinnedDesired(t, sc1)), ModRevision: rev}
	}
	step := func(what string, rev int64, sc1 int, apply func() error) {
		t.Helper()
		gen := inv.View().Generations["demo-main"]
		select { // drain: the step must notify on its own
		case <-inv.Changed():
		default:
		}
		if err := apply(); err != nil {
			t.Fatal(err)
		}
		v := inv.View()
		if got := pinSC1(v); got != sc1 || v.StateRevision != rev {
			t.Fatalf("%s: SC1 %d at revision %d, want %d at %d", what, got, v.StateRevision, sc1, rev)
		}
		if g := v.Generations["demo-main"]; g == gen {
			t.Fatalf("%s: demo-main still at generation %d", what, g)
		}
		select {
		case <-inv.Changed():
		default:
			t.Fatalf("%s: no change notified", what)
		}
	}
	step("listed", 10, 45, func() error { return s.Reset([]*mvccpb.KeyValue{kv(10, 45)}, 10) })
	rev := int64(10)
	for i := range 20 {
		rev++
		sc1 := 20 + (i*7)%50
		step(fmt.Sprintf("flap write %d", i), rev, sc1, func() error {
			return s.Apply([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv(rev, sc1)}}, rev)
		})
	}
	// The round ends with store_replaced; the write at rev+1 was not
	// delivered by it, the relist has it.
	s.restarted(etcdwatch.ReasonStoreReplaced, true, errors.New("etcd revision went back"))
	step("relisted after store_replaced", rev+1, 66, func() error { return s.Reset([]*mvccpb.KeyValue{kv(rev+1, 66)}, rev+3) })
	step("final row", rev+4, 30, func() error {
		return s.Apply([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: kv(rev+4, 30)}}, rev+4)
	})
}

// On embedded etcd: BFE1's pin flapped while every input's watch is made
// to resync with store_replaced (the lineage record rewritten, as a
// restored store shows it), then a final row: the inventory holds it
// within the deadline.
func TestDesiredFlapThroughStoreReplacedResyncs(t *testing.T) {
	_, cli := etcdtest.New(t)
	lineage := func(id string) string {
		b, _ := json.Marshal(snapshot.LineageRecord{ID: id, CreatedAt: time.Now().UTC()})
		return string(b)
	}
	put(t, cli, layout.Lineage(), lineage("L1"))
	put(t, cli, layout.Desired(), pinnedDesired(t, 45))
	inv := start(t, cli, &clock{t: time.Now()})
	poll.EventuallyTrue(t, 10*time.Second, "listed", func() bool { return inv.Synced() && pinSC1(inv.View()) == 45 })
	resyncs := func() float64 { return testutil.ToFloat64(inv.m.resyncs.WithLabelValues(inDesired)) }
	before := resyncs()
	put(t, cli, layout.Lineage(), lineage("L2"))
	i := 0
	flap := func() {
		put(t, cli, layout.Desired(), pinnedDesired(t, 31+(i*7)%39)) // never the final 30
		i++
	}
	poll.EventuallyTrue(t, 15*time.Second, "a store_replaced resync of the desired input during the flap", func() bool {
		flap()
		return resyncs() > before
	})
	for range 10 { // the flap goes on after the relist
		flap()
	}
	rev := put(t, cli, layout.Desired(), pinnedDesired(t, 30))
	poll.EventuallyTrue(t, 10*time.Second, "the final row held", func() bool {
		v := inv.View()
		return pinSC1(v) == 30 && v.StateRevision == rev
	})
	if v := inv.View(); v.State == nil || len(v.State.Pins) != 1 || v.State.Pins[0].Weights[config.Blackhole] != 10 {
		t.Fatalf("final state %+v", v.State)
	}
}
