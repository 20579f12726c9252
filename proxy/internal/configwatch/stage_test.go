package configwatch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// A staged pointer: the proxy its stage selects applies the candidate, the
// other keeps the stable snapshot (and never fetches the candidate); both
// report the stage. Promotion (a plain pointer to the candidate) reaches
// the other one.
func TestStagedPointerSelectsByID(t *testing.T) {
	_, cli := etcdtest.New(t)
	canary, other := newRecorder(), newRecorder()
	wc := start(t, Config{Client: cli, Apply: canary.apply, ID: "p-canary"})
	wo := start(t, Config{Client: cli, Apply: other.apply, ID: "p-other"})
	stable := lineageSnapshot("L1", 5)
	publish(t, cli, stable)
	poll.EventuallyTrue(t, 10*time.Second, "both on v5", func() bool { return canary.last() == 5 && other.last() == 5 })

	cand := lineageSnapshot("L1", 6)
	m, parts, err := snapshot.Encode(cand)
	if err != nil {
		t.Fatal(err)
	}
	mraw, _ := json.Marshal(m)
	ptr := pointerOf(stable)
	ptr.Candidate = &snapshot.Candidate{Version: 6, Hash: cand.Meta.Hash, Rollout: "r1", Stage: 0, IDs: []string{"p-canary"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range parts {
		k, _ := layout.Part(p.Digest)
		if _, err := cli.Put(ctx, k, string(p.Data)); err != nil {
			t.Fatal(err)
		}
	}
	mk, _ := layout.Snapshot(pc, 6)
	if _, err := cli.Put(ctx, mk, string(mraw)); err != nil {
		t.Fatal(err)
	}
	putPointer(t, cli, ptr)
	poll.EventuallyTrue(t, 10*time.Second, "canary on v6", func() bool { return canary.last() == 6 })
	poll.EventuallyTrue(t, 10*time.Second, "other reports the stage", func() bool {
		st := wo.Status()
		return st.Rollout == "r1" && !st.InStage && st.PointerVersion == 5
	})
	if st := wc.Status(); !st.InStage || st.Rollout != "r1" || st.PointerVersion != 6 {
		t.Fatalf("canary status %+v, want in stage r1, pointer v6", st)
	}
	if !equal(other.versions(), []uint64{5}) {
		t.Fatalf("the proxy outside the stage applied %v, want only v5", other.versions())
	}
	// Promotion: the pointer names the candidate, no stage.
	putPointer(t, cli, snapshot.Pointer{Lineage: "L1", Version: 6, Hash: cand.Meta.Hash})
	poll.EventuallyTrue(t, 10*time.Second, "other on v6", func() bool { return other.last() == 6 && wo.Status().Rollout == "" })
}

// A percent stage selects by the hash of the id.
func TestCandidateSelectsPercent(t *testing.T) {
	c := &snapshot.Candidate{Percent: 50}
	in := 0
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p"} {
		if c.Selects(id) != (snapshot.ProxyHash(id) < 50) {
			t.Fatalf("Selects(%q) disagrees with ProxyHash %v", id, snapshot.ProxyHash(id))
		}
		if c.Selects(id) {
			in++
		}
	}
	if in == 0 || in == 16 {
		t.Fatalf("50 %% selected %d of 16 ids", in)
	}
	if (&snapshot.Candidate{Percent: 100}).Selects("x") != true || (*snapshot.Candidate)(nil).Selects("x") {
		t.Fatal("100 % selects every proxy; no candidate selects none")
	}
}

func putPointer(t testing.TB, cli *clientv3.Client, p snapshot.Pointer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	raw, _ := json.Marshal(p)
	ck, _ := layout.Current(pc)
	if _, err := cli.Put(ctx, ck, string(raw)); err != nil {
		t.Fatal(err)
	}
}
