//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Catalogue B3: the leading scheduler is cut off from etcd (a fault proxy
// between it and etcd blackholes every byte) while it still believes it
// leads. Its session expires, the other scheduler takes over and publishes
// an operator change; when the link heals, the cut-off one publishes
// nothing (every version since the takeover is the new leader's: I6). The
// proxies serve throughout (0 failed requests).
func TestFaultsSchedulerCutOffFromEtcd(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Replace the fleet's scheduler by one that reaches etcd through a
	// fault proxy only.
	fp, err := faultproxy.New(etcdAddr(f))
	if err != nil {
		t.Fatal(err)
	}
	// Closed after the scheduler stopped (cleanups run last in, first out):
	// with its etcd unreachable, lbscheduler did not exit within 15 s of SIGTERM.
	t.Cleanup(func() { fp.Close() })
	ownScheduler(t, f, "sched-cut", fp.URL())
	eventually(t, 30*time.Second, "sched-cut leads", func() error {
		r, err := f.Client.Get(ctx, f.Layout.Leader())
		if err != nil || len(r.Kvs) == 0 {
			return fmt.Errorf("no leader key (%v)", err)
		}
		if !strings.Contains(string(r.Kvs[0].Value), `"sched-cut"`) {
			return fmt.Errorf("leader is %s", r.Kvs[0].Value)
		}
		return nil
	})
	cutID, cutKey, cutRev := electionLeader(ctx, t, f)
	if cutID != "sched-cut" {
		t.Fatalf("the leader key names sched-cut, the election %q", cutID)
	}
	// sched-cut publishes a change, so that it is known to be a working leader.
	setRow(ctx, t, f, 40)
	waitRow(ctx, t, f, 40, "sched-cut")
	before := waitApplied(t, f, "BFE2", 30*time.Second)

	l := startLoad(proxyURLs(f, "BFE2"), 23)
	defer l.end()
	fp.SetMode(faultproxy.Blackhole)
	cutAt := time.Now()
	if err := f.RestartScheduler(1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "sched-1 takes over", func() error {
		if i := leaderIndex(t, f); i != 0 {
			return fmt.Errorf("leader index %d", i)
		}
		return nil
	})
	takeover := time.Since(cutAt)
	since := takeoverRevision(ctx, t, f, cutKey, cutRev)
	setRow(ctx, t, f, 60)
	tv := waitRow(ctx, t, f, 60, "sched-1")
	// Heal, then give the cut-off scheduler a reason to publish: an
	// operator change it would act on if it still believed it led.
	fp.SetMode(faultproxy.PassThrough)
	healed := time.Now()
	setRow(ctx, t, f, 70)
	last := waitRow(ctx, t, f, 70, "sched-1")
	waitApplied(t, f, "BFE2", 30*time.Second)
	recovered := time.Since(healed)
	failed, sent, _, failures := l.end()

	authors := checkOnePublisher(ctx, t, f, "BFE2", before, last, "sched-cut", "sched-1", since)
	t.Logf("B3 sched-cut blackholed from etcd at v%d: sched-1 led %.1f s later (revision %d), published SC1=60 as v%d; v%d..v%d by %v; after the heal the proxies applied v%d in %.1f s; %d of %d requests failed",
		before, takeover.Seconds(), since, tv, before+1, last, authors, last, recovered.Seconds(), failed, sent)
	if failed != 0 {
		t.Errorf("B3: %d of %d requests failed: %v", failed, sent, failures)
	}
}

func setRow(ctx context.Context, t *testing.T, f *fleet.Fleet, sc1 int) {
	t.Helper()
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2",
		fmt.Sprintf("SC1=%d", sc1), fmt.Sprintf("SC2=%d", 100-sc1), "--reason", "fault test", "--yes")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d %v\n%s", code, err, out)
	}
}

// waitRow waits until BFE2's live snapshot has SC1 = sc1, authored by the
// scheduler id, and returns its version.
func waitRow(ctx context.Context, t *testing.T, f *fleet.Fleet, sc1 int, id string) uint64 {
	t.Helper()
	var v uint64
	eventually(t, 30*time.Second, fmt.Sprintf("%s publishes SC1=%d", id, sc1), func() error {
		s, err := liveSnapshot(ctx, f, "BFE2")
		if err != nil {
			return err
		}
		if s.Clusters["demo-main"].Row.Weights["SC1"] != sc1 {
			return fmt.Errorf("v%d row %v", s.Meta.Version, s.Clusters["demo-main"].Row.Weights)
		}
		if !strings.HasSuffix(s.Meta.Author, "/"+id) {
			return fmt.Errorf("v%d authored by %q, want %s", s.Meta.Version, s.Meta.Author, id)
		}
		v = s.Meta.Version
		return nil
	})
	return v
}

// electionLeader reads the scheduler election: the leader's id and
// election key (the key created first under the prefix; its create revision
// is the term every publish of that leader is fenced on,
// publish.Leadership.Fence) and the revision it read at.
func electionLeader(ctx context.Context, t *testing.T, f *fleet.Fleet) (id, key string, rev int64) {
	t.Helper()
	r, err := f.Client.Get(ctx, f.Layout.Election()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatalf("read the election: %v", err)
	}
	if len(r.Kvs) == 0 {
		return "", "", r.Header.Revision
	}
	return string(r.Kvs[0].Value), string(r.Kvs[0].Key), r.Header.Revision
}

// takeoverRevision waits for the election key to be deleted (its leader's
// session ended) at or after revision from and returns the revision of the
// delete: from then on no publish fenced on that term can succeed.
func takeoverRevision(ctx context.Context, t *testing.T, f *fleet.Fleet, key string, from int64) int64 {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for wr := range f.Client.Watch(wctx, key, clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch %s from revision %d: %v", key, from, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return ev.Kv.ModRevision
			}
		}
	}
	t.Fatalf("election key %s still there 60 s after revision %d", key, from)
	return 0
}

// manifestRevision is the etcd revision at which pc's version v was
// published (its manifest key's create revision); 0 if there is no such
// version.
func manifestRevision(ctx context.Context, t *testing.T, f *fleet.Fleet, pc string, v uint64) int64 {
	t.Helper()
	k, err := f.Layout.Snapshot(pc, v)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Client.Get(ctx, k, clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("read %s: %v", k, err)
	}
	if len(r.Kvs) == 0 {
		return 0
	}
	return r.Kvs[0].CreateRevision
}

// checkOnePublisher checks I6 over pc's versions after..to, across the
// takeover of scheduler newID from oldID, whose term ended at revision since
// (takeoverRevision): every version exists (none skipped) and names the one
// before as its parent; the ones written before since are oldID's, every
// later one newID's — none of oldID's after the takeover, whatever it still
// believes — and the last is newID's. It returns the authors in version
// order, for the log.
func checkOnePublisher(ctx context.Context, t *testing.T, f *fleet.Fleet, pc string, after, to uint64, oldID, newID string, since int64) []string {
	t.Helper()
	if after >= to || since == 0 {
		t.Fatalf("I6: nothing to check: after v%d up to v%d, takeover at revision %d", after, to, since)
	}
	var authors []string
	taken := false
	for v := after + 1; v <= to; v++ {
		s, err := f.Snapshot(ctx, pc, v)
		if err != nil {
			t.Fatalf("I6: v%d: %v", v, err)
		}
		authors = append(authors, s.Meta.Author)
		if s.Meta.Version != v || s.Meta.Parent != v-1 {
			t.Errorf("I6: v%d says version %d, parent %d", v, s.Meta.Version, s.Meta.Parent)
		}
		rev := manifestRevision(ctx, t, f, pc, v)
		want := newID
		if rev < since && !taken {
			want = oldID
		}
		taken = want == newID
		if !strings.HasSuffix(s.Meta.Author, "/"+want) {
			t.Errorf("I6: v%d (revision %d; %s's term ended at %d) authored by %q, want %s", v, rev, oldID, since, s.Meta.Author, want)
		}
		if want == newID && rev <= since {
			t.Errorf("I6: v%d by %s written at revision %d, before %s's term ended at %d", v, newID, rev, oldID, since)
		}
	}
	if !taken {
		t.Errorf("I6: no version after v%d up to v%d is %s's", after, to, newID)
	}
	return authors
}
