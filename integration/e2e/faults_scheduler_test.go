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

	var authors []string
	for v := tv; v <= last; v++ {
		s, err := f.Snapshot(ctx, "BFE2", v)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		authors = append(authors, s.Meta.Author)
		if !strings.HasSuffix(s.Meta.Author, "/sched-1") {
			t.Errorf("I6: v%d authored by %q after sched-1 took over", v, s.Meta.Author)
		}
	}
	t.Logf("B3 sched-cut blackholed from etcd at v%d: sched-1 led %.1f s later; v%d..v%d by %v; after the heal the proxies applied v%d in %.1f s; %d of %d requests failed",
		before, takeover.Seconds(), tv, last, authors, last, recovered.Seconds(), failed, sent)
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
