package lbscheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// A hand-written shift intent that fails decoding is listed in the
// leader's status with the rule; the published versions record the
// operator intents they include with author and reason.
func TestSchedulerStatusListsInvalidIntentsAndSnapshotsTheirAuthors(t *testing.T) {
	srv, cli := etcdtest.New(t)
	st := strings.Replace(desired(0, "30s"), `"scheduler":`, `"drains": [{"cluster": "demo-main", "subcluster": "SC2", "author": "carol", "reason": "maintenance"}],
  "scheduler":`, 1)
	if _, err := cli.Put(context.Background(), layout.Desired(), st); err != nil {
		t.Fatal(err)
	}
	k, _ := layout.Shift("s-hand")
	if _, err := cli.Put(context.Background(), k, `{"id": "s-hand", "percent": "fifty"}`); err != nil {
		t.Fatal(err)
	}
	s := startScheduler(t, srv, "S1", nil)
	poll.EventuallyTrue(t, 20*time.Second, "the invalid shift in the scheduler's status", func() bool {
		st, _, ok := schedulerStatus(t, s)
		return ok && strings.HasPrefix(st.Invalid[k], "shift intent ignored: ")
	})
	want := []snapshot.Intent{{Kind: snapshot.IntentDrain, Object: "demo-main/SC2", Author: "carol", Reason: "maintenance"}}
	poll.EventuallyTrue(t, 20*time.Second, "BFE1 published", func() bool {
		st, _, _ := schedulerStatus(t, s)
		return st.ProxyClusters["BFE1"].Version >= 1
	})
	if got := live(t, cli, "BFE1").Meta.Intents; len(got) != 1 || got[0] != want[0] {
		t.Fatalf("BFE1's intents %+v; want %+v", got, want)
	}
}
