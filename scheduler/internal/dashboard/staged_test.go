package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// The staged rollout records under rollouts/ reach the document with the
// proxy cluster's rollout view (stage, selected, gates, state, reason); a
// corrupt record is ignored; a deleted one leaves the view.
func TestStagedRolloutRecords(t *testing.T) {
	_, cli := etcdtest.New(t)
	f := &fakeInputs{}
	f.set(func(in *Inputs) { in.SchedulerID, in.State = "s1", state() })
	d := New(Options{Client: cli, Layout: layout, Inputs: f.get, Refresh: time.Hour, Heartbeat: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); d.Run(ctx) }()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	defer func() { cancel(); <-ran }()
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	docs, _ := events(t, sctx, srv.URL)
	next(t, docs, 10*time.Second, "the first document", func(Doc) bool { return true })

	k, _ := layout.Rollout("BFE1")
	rec := rs.Staged{ID: "BFE1-v5", ProxyCluster: "BFE1", State: rs.StageRolledBack, StableVersion: 4, CandidateVersion: 5, Stage: 0, Stages: 2,
		Selected: []string{"p1"}, FailedGate: "5xx", Reason: "stage 1 of 2, gate 5xx: stage 5xx 40.0% of 200 answers", RollbackVersion: 6,
		Gates: []rs.Gate{{Name: "apply", OK: true, Judged: true, Detail: "p1 runs v5"}, {Name: "5xx", Judged: true, Detail: "stage 5xx 40.0% of 200 answers"}}}
	b, _ := json.Marshal(rec)
	if _, err := cli.Put(context.Background(), k, string(b)); err != nil {
		t.Fatal(err)
	}
	doc := next(t, docs, 10*time.Second, "BFE1's rollout record", func(d Doc) bool {
		return len(d.Rollout) == 1 && d.Rollout[0].Staged != nil
	})
	got := doc.Rollout[0].Staged
	if got.State != rs.StageRolledBack || got.Reason != rec.Reason || len(got.Gates) != 2 || got.Gates[1].OK || got.Gates[1].Detail != rec.Gates[1].Detail ||
		len(got.Selected) != 1 || got.Selected[0] != "p1" || got.RollbackVersion != 6 || got.Stages != 2 {
		t.Fatalf("staged view %+v, want the record %+v", got, rec)
	}
	// A corrupt record is not shown as if it were the last good one.
	if _, err := cli.Put(context.Background(), k, "{not json"); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 10*time.Second, "the corrupt record ignored", func(d Doc) bool { return len(d.Rollout) == 1 && d.Rollout[0].Staged == nil })
	if _, err := cli.Put(context.Background(), k, string(b)); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 10*time.Second, "the record back", func(d Doc) bool { return len(d.Rollout) == 1 && d.Rollout[0].Staged != nil })
	if _, err := cli.Delete(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 10*time.Second, "the record deleted", func(d Doc) bool { return len(d.Rollout) == 1 && d.Rollout[0].Staged == nil })
}
