package lbscheduler

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func schedulerStatus(t *testing.T, s *Scheduler) (report.SchedulerStatus, int64, bool) {
	t.Helper()
	r, err := s.cli.Get(context.Background(), layout.SchedulerStatus())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return report.SchedulerStatus{}, 0, false
	}
	var st report.SchedulerStatus
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	return st, r.Kvs[0].Lease, true
}

// The leader records, under its lease, the last publish result per proxy
// cluster: published vN from revision R, or failed with the validator's
// reason; the key goes with the leadership.
func TestSchedulerStatusPublishedAndFailed(t *testing.T) {
	srv, cli := etcdtest.New(t)
	pr, err := cli.Put(context.Background(), layout.Desired(), desired(0, "30s"))
	if err != nil {
		t.Fatal(err)
	}
	s := startScheduler(t, srv, "S1", nil)
	poll.EventuallyTrue(t, 20*time.Second, "status with BFE1 published", func() bool {
		st, _, ok := schedulerStatus(t, s)
		return ok && st.ProxyClusters["BFE1"].Result == report.PublishPublished
	})
	st, lease, _ := schedulerStatus(t, s)
	b1 := st.ProxyClusters["BFE1"]
	if st.LeaderID != "S1" || st.InputRevision != pr.Header.Revision || b1.Version != 1 || b1.InputRevision != pr.Header.Revision || b1.Lineage == "" {
		t.Fatalf("status %+v", st)
	}
	if in := live(t, cli, "BFE1").Meta.Inputs; in == nil || in.Desired != pr.Header.Revision {
		t.Fatalf("v1 inputs %+v, want desired revision %d", in, pr.Header.Revision)
	}
	if lease == 0 || lease != int64(s.lead.Load().Lease()) {
		t.Fatalf("status bound to lease %x, the leader's is %x", lease, s.lead.Load().Lease())
	}

	// A state the validator of snapshots refuses: BFE1's pinned row with
	// every sub-cluster drained would drop 100 % without allow_full_drop.
	bad := strings.Replace(desired(0, "30s"), `"scheduler":`, `"pins": [{"proxy_cluster": "BFE1", "cluster": "demo-main", "weights": {"SC1": 50, "SC2": 50}}],
  "drains": [{"cluster": "demo-main", "subcluster": "SC1"}, {"cluster": "demo-main", "subcluster": "SC2"}],
  "scheduler":`, 1)
	br, err := cli.Put(context.Background(), layout.Desired(), bad)
	if err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "BFE1 failed", func() bool {
		st, _, _ := schedulerStatus(t, s)
		return st.ProxyClusters["BFE1"].Result == report.PublishFailed
	})
	st, _, _ = schedulerStatus(t, s)
	b1 = st.ProxyClusters["BFE1"]
	blocked, why := b1.Blocked()
	if !blocked || b1.InputRevision != br.Header.Revision || b1.Version != 1 || !strings.Contains(why, "invalid snapshot") || st.InputRevision != br.Header.Revision {
		t.Fatalf("BFE1 after the bad state: %+v (blocked %v: %s)", b1, blocked, why)
	}
	t.Logf("BLOCKED reason: %s", why)
	raw, _ := json.Marshal(st)
	t.Logf("status: %s", raw)

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := schedulerStatus(t, s); ok {
		t.Fatal("scheduler status outlived the leadership")
	}
}
