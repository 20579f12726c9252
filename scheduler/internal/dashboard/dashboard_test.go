package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var layout = keys.MustNew("/sluice")

// fakeInputs is a scheduler's inputs the test changes at will.
type fakeInputs struct {
	mu sync.Mutex
	in Inputs
}

func (f *fakeInputs) get() (Inputs, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.in, f.in.State != nil
}

func (f *fakeInputs) set(mut func(*Inputs)) {
	f.mu.Lock()
	mut(&f.in)
	f.mu.Unlock()
}

func state() *config.State {
	return &config.State{
		Topology: config.Topology{IDCs: []string{"IDC1", "IDC2"}, ProxyClusters: map[string]config.ProxyCluster{"BFE1": {IDC: "IDC1"}}},
		Clusters: map[string]config.Cluster{"c": {SubClusters: map[string]config.SubCluster{
			"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "10.0.0.1", Port: 80, Weight: 10}}},
			"SC2": {IDC: "IDC2"},
		}}},
		Drains: []config.Drain{{Cluster: "c", SubCluster: "SC2", Reason: "maintenance"}},
		Pins:   []config.Pin{{ProxyCluster: "BFE1", Cluster: "c", Reason: "demo"}},
	}
}

// events reads one SSE stream; it returns the documents channel and a
// channel closed when the stream ended.
func events(t *testing.T, ctx context.Context, url string) (<-chan Doc, <-chan struct{}) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	docs, ended := make(chan Doc, 32), make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var doc Doc
				if err := json.Unmarshal([]byte(d), &doc); err != nil {
					t.Errorf("event: %v", err)
					return
				}
				select {
				case docs <- doc:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return docs, ended
}

func next(t *testing.T, docs <-chan Doc, within time.Duration, what string, ok func(Doc) bool) Doc {
	t.Helper()
	tm := time.NewTimer(within)
	defer tm.Stop()
	for {
		select {
		case d := <-docs:
			if ok(d) {
				return d
			}
		case <-tm.C:
			t.Fatalf("no document with %s within %s", what, within)
		}
	}
}

func TestNotifyWatchesAndStreams(t *testing.T) {
	_, cli := etcdtest.New(t)
	f := &fakeInputs{}
	f.set(func(in *Inputs) {
		in.SchedulerID, in.State = "s1", state()
		in.Members = map[string]map[string][]config.Instance{"c": {"SC1": {{Addr: "10.0.0.1", Port: 80, Weight: 10, State: config.StateHealthy}, {Addr: "10.0.0.2", Port: 80, Weight: 10, State: config.StateUnhealthy}}}}
		in.Rows = map[string]map[string]RowInput{"BFE1": {"c": {Row: snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 100}, Pinned: true},
			Explanation: &snapshot.Explanation{Mode: "pinned"}}}}
		in.Hashes = map[string]string{"BFE1": "h2"}
	})
	// Refresh an hour: only Notify and the watches rebuild here.
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
	docs, ended := events(t, sctx, srv.URL)
	doc := next(t, docs, 5*time.Second, "the first document", func(Doc) bool { return true })
	if len(doc.Clusters) != 1 || len(doc.Clusters[0].Rows) != 1 {
		t.Fatalf("clusters %+v", doc.Clusters)
	}
	c := doc.Clusters[0]
	sc1, sc2 := c.SubClusters[0], c.SubClusters[1]
	if sc1.Available != 1 || sc1.Total != 2 || !sc2.Drained || sc2.DrainReason != "maintenance" || sc2.Total != 0 {
		t.Fatalf("sub-clusters %+v", c.SubClusters)
	}
	r := c.Rows[0]
	if !r.Pinned || r.PinReason != "demo" || r.Weights["SC1"] != 100 || r.Weights[config.Blackhole] != 0 || r.Explanation.Mode != "pinned" {
		t.Fatalf("row %+v", r)
	}
	if doc.Actions {
		t.Fatal("actions offered without a token")
	}

	// Notify: the scheduler's new plan reaches the stream.
	f.set(func(in *Inputs) {
		// a new map, never a write into the old one: Inputs are the
		// scheduler's immutable values, which the dashboard reads unlocked
		in.Rows = map[string]map[string]RowInput{"BFE1": {"c": {Row: snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 90, config.Blackhole: 10}}}}}
	})
	d.Notify()
	next(t, docs, 2*time.Second, "the new row", func(d Doc) bool { return d.Clusters[0].Rows[0].Weights[config.Blackhole] == 10 })

	// A pointer and a proxy status in etcd: the dashboard's own watches.
	ck, _ := layout.Current("BFE1")
	ptr, _ := json.Marshal(snapshot.Pointer{Version: 7, Hash: "h1"})
	if _, err := cli.Put(context.Background(), ck, string(ptr)); err != nil {
		t.Fatal(err)
	}
	sk, _ := layout.Status("BFE1", "p1")
	st, _ := json.Marshal(report.ProxyStatus{AppliedVersion: 6, RejectedVersion: 7, RejectedReason: "bad route", EtcdConnected: true, UpdatedAt: time.Now(), WatchLagSeconds: 0.5})
	if _, err := cli.Put(context.Background(), sk, string(st)); err != nil {
		t.Fatal(err)
	}
	doc = next(t, docs, 2*time.Second, "p1 REJECTED at v7", func(d Doc) bool {
		return len(d.Rollout) == 1 && d.Rollout[0].LiveVersion == 7 && len(d.Rollout[0].Proxies) == 1 && d.Rollout[0].Proxies[0].State == rollout.Rejected
	})
	rv := doc.Rollout[0]
	if p := rv.Proxies[0]; p.ID != "p1" || p.Reason != "bad route" || p.VersionsBehind != 1 || !rv.Unpublished {
		t.Fatalf("rollout %+v", rv)
	}
	if _, err := cli.Delete(context.Background(), sk); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 2*time.Second, "p1 gone", func(d Doc) bool { return len(d.Rollout) == 1 && len(d.Rollout[0].Proxies) == 0 })

	// Its last-seen record: listed GONE with when. The leader's status:
	// the document says a scheduler leads, and why BFE1 is BLOCKED.
	if !doc.NoLeader {
		t.Fatal("no scheduler status in etcd, yet the document has a leader")
	}
	lk, _ := layout.LastSeen("BFE1", "p1")
	seenAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	st, _ = json.Marshal(report.ProxyStatus{AppliedVersion: 6, EtcdConnected: true, UpdatedAt: seenAt})
	if _, err := cli.Put(context.Background(), lk, string(st)); err != nil {
		t.Fatal(err)
	}
	doc = next(t, docs, 2*time.Second, "p1 GONE", func(d Doc) bool {
		return len(d.Rollout[0].Proxies) == 1 && d.Rollout[0].Proxies[0].State == rollout.Gone
	})
	if p := doc.Rollout[0].Proxies[0]; p.ID != "p1" || !p.LastSeen.Equal(seenAt) || !strings.HasPrefix(p.Reason, "status lease expired; last seen ") {
		t.Fatalf("GONE p1: %+v", p)
	}
	sst, _ := json.Marshal(report.SchedulerStatus{LeaderID: "s1", InputRevision: 9, ProxyClusters: map[string]report.PublishResult{
		"BFE1": {Result: report.PublishFailed, InputRevision: 9, Reason: "pinned row would drop everything"}}})
	if _, err := cli.Put(context.Background(), layout.SchedulerStatus(), string(sst)); err != nil {
		t.Fatal(err)
	}
	doc = next(t, docs, 2*time.Second, "a leader and BFE1 BLOCKED", func(d Doc) bool { return !d.NoLeader && d.Rollout[0].Blocked != "" })
	if b := doc.Rollout[0].Blocked; b != "input revision 9 not published: pinned row would drop everything" {
		t.Fatalf("blocked %q", b)
	}
	if _, err := cli.Delete(context.Background(), layout.SchedulerStatus()); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 2*time.Second, "no leader again", func(d Doc) bool { return d.NoLeader && d.Rollout[0].Blocked == "" })

	// An unchanged rebuild makes no new document; a change does. p1's
	// last-seen record goes first: its "(1m0s ago)" moves with the clock,
	// and a rebuild across a second boundary rightly made a new document.
	if _, err := cli.Delete(context.Background(), lk); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 10*time.Second, "p1 forgotten", func(d Doc) bool { return len(d.Rollout[0].Proxies) == 0 })
	_, seq, _ := d.current()
	d.rebuild()
	if _, again, _ := d.current(); again != seq {
		t.Fatalf("an unchanged rebuild made document #%d after #%d", again, seq)
	}
	f.set(func(in *Inputs) { in.SchedulerID = "s1-renamed" })
	d.rebuild()
	if got := next(t, docs, 2*time.Second, "the renamed scheduler", func(d Doc) bool { return d.SchedulerID == "s1-renamed" }); got.Seq != seq+1 {
		t.Fatalf("document #%d after #%d", got.Seq, seq)
	}

	// The JSON endpoint serves the same document.
	resp, err := http.Get(srv.URL + "/ui/api/state")
	if err != nil {
		t.Fatal(err)
	}
	var plain Doc
	err = json.NewDecoder(resp.Body).Decode(&plain)
	resp.Body.Close()
	if err != nil || plain.SchedulerID != "s1-renamed" {
		t.Fatalf("state: %v %+v", err, plain.SchedulerID)
	}

	// Stopping the dashboard ends open streams (the API server's graceful
	// shutdown must not wait for them).
	cancel()
	<-ran
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the event stream stayed open after the dashboard stopped")
	}
}

// The dashboard shows every state the control plane reports, as
// api/rollout decides it: AHEAD, STALE, GONE (from a last-seen record, with
// when), REJECTED, lineage, BLOCKED (reason), WAITING and no leader.
func TestRolloutViews(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ps := func(id, lineage string, v uint64, mod func(*report.ProxyStatus)) report.ProxyStatus {
		s := report.ProxyStatus{ProxyCluster: "BFE1", ID: id, AppliedLineage: lineage, AppliedVersion: v, EtcdConnected: true, UpdatedAt: now.Add(-time.Second)}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	ptrs := live{"BFE1": {Lineage: "L1", Version: 7, Hash: "h7"}, "BFE2": {Lineage: "L1", Version: 3}}
	rec := records{
		sts: statuses{
			"a": ps("p1", "L1", 7, nil),
			"b": ps("p2", "L1", 9, nil),
			"c": ps("p3", "L1", 7, func(s *report.ProxyStatus) { s.UpdatedAt, s.WatchLagSeconds = now.Add(-time.Minute), 0.5 }),
			"d": ps("p4", "L0", 20, func(s *report.ProxyStatus) { s.LineageChanges, s.PreviousLineage = 1, "L9" }),
			"e": ps("p5", "L1", 6, func(s *report.ProxyStatus) { s.RejectedVersion, s.RejectedReason = 7, "bad route" }),
		},
		seen: statuses{
			"f": ps("p6", "L1", 6, func(s *report.ProxyStatus) { s.UpdatedAt = now.Add(-2 * time.Minute) }),
			"g": ps("p1", "L1", 7, nil), // live: not GONE
		},
		sched: &report.SchedulerStatus{InputRevision: 50, ProxyClusters: map[string]report.PublishResult{
			"BFE1": {Result: report.PublishFailed, InputRevision: 50, Reason: "row BFE1/c would be 100% blackhole"},
			"BFE2": {Result: report.PublishUnchanged, Lineage: "L1", Version: 3, InputRevision: 40},
		}},
	}
	d := build(Inputs{}, false, ptrs, rec, false, now)
	if d.NoLeader || len(d.Rollout) != 2 {
		t.Fatalf("no leader %v, rollout %+v", d.NoLeader, d.Rollout)
	}
	b1, b2 := d.Rollout[0], d.Rollout[1]
	var got []string
	for _, p := range b1.Proxies {
		got = append(got, p.ID+"="+p.State)
	}
	if want := "p1=SYNCED p2=AHEAD p3=STALE p4=PENDING p5=REJECTED p6=GONE"; strings.Join(got, " ") != want {
		t.Fatalf("BFE1 states %v, want %s", got, want)
	}
	p3, p4, p6 := b1.Proxies[2], b1.Proxies[3], b1.Proxies[5]
	// The lag p3 reported a minute ago, plus that minute: not the figure
	// it last wrote.
	if !p3.LastSeen.Equal(now.Add(-time.Minute)) || p3.Reason != "last seen 2026-12-01T09:59:00Z (1m0s ago)" || p3.WatchLagSeconds != 60.5 {
		t.Errorf("STALE p3: %+v", p3)
	}
	if p6.Reason != "status lease expired; last seen 2026-12-01T09:58:00Z (2m0s ago)" || !p6.LastSeen.Equal(now.Add(-2*time.Minute)) || p6.VersionsBehind != 1 {
		t.Errorf("GONE p6: %+v", p6)
	}
	if p4.AppliedLineage != "L0" || p4.PreviousLineage != "L9" || p4.LineageChanges != 1 || p4.VersionsBehind != 0 || !strings.Contains(p4.Reason, "applied lineage") {
		t.Errorf("lineage of p4: %+v", p4)
	}
	if b1.Blocked != "input revision 50 not published: row BFE1/c would be 100% blackhole" || b1.Waiting != "" || b1.Converged || b1.LiveLineage != "L1" {
		t.Errorf("BFE1: blocked %q waiting %q converged %v", b1.Blocked, b1.Waiting, b1.Converged)
	}
	if b2.Waiting != "the scheduler has not published input revision 50 yet (it last computed 40)" || b2.Blocked != "" || b2.Converged {
		t.Errorf("BFE2: blocked %q waiting %q converged %v", b2.Blocked, b2.Waiting, b2.Converged)
	}

	// No leader; a GONE proxy that went away before the live version was
	// published does not count: BFE1 with only p1 live converges.
	rec = records{sts: statuses{"a": ps("p1", "L1", 7, nil)}, seen: statuses{"f": rec.seen["f"]},
		started: map[string]time.Time{"BFE1": now.Add(-time.Minute)}}
	d = build(Inputs{}, false, live{"BFE1": ptrs["BFE1"]}, rec, false, now)
	if b1 := d.Rollout[0]; !d.NoLeader || !b1.Converged || len(b1.Proxies) != 2 || !b1.Proxies[1].NotCounted || b1.Waiting != "" {
		t.Fatalf("no leader %v, rollout %+v", d.NoLeader, d.Rollout)
	}
}

// The page says a write of revision N is live only once LiveRevision ≥ N:
// the scheduler published (or found unchanged) an input of N or later AND
// every proxy that counts runs that version — never while the proxies run
// the version from before, even when the pointer watch lags the status.
func TestRolloutViewLiveRevision(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := func(v uint64) statuses {
		return statuses{"a": {ProxyCluster: "BFE1", ID: "p1", AppliedLineage: "L1", AppliedVersion: v, EtcdConnected: true, UpdatedAt: now.Add(-time.Second)}}
	}
	sched := func(result string, v uint64) *report.SchedulerStatus {
		return &report.SchedulerStatus{InputRevision: 60, ProxyClusters: map[string]report.PublishResult{
			"BFE1": {Result: result, Lineage: "L1", Version: v, InputRevision: 60, Reason: map[string]string{report.PublishFailed: "invalid"}[result]}}}
	}
	for _, c := range []struct {
		name    string
		ptr     uint64
		applied uint64
		sched   *report.SchedulerStatus
		want    int64
	}{
		{"published v8, the pointer watch still at v7, the proxy on v7", 7, 7, sched(report.PublishPublished, 8), 0},
		{"published v8, the proxy still on v7", 8, 7, sched(report.PublishPublished, 8), 0},
		{"published v8, the proxy on v8", 8, 8, sched(report.PublishPublished, 8), 60},
		{"unchanged at v7, the proxy on v7", 7, 7, sched(report.PublishUnchanged, 7), 60},
		{"not published (failed), the proxy on v7", 7, 7, sched(report.PublishFailed, 7), 0},
		{"fenced, the proxy on v7", 7, 7, sched(report.PublishFenced, 7), 0},
		{"no scheduler is leading", 7, 7, nil, 0},
	} {
		d := build(Inputs{}, false, live{"BFE1": {Lineage: "L1", Version: c.ptr}}, records{sts: st(c.applied), sched: c.sched}, false, now)
		if got := d.Rollout[0].LiveRevision; got != c.want {
			t.Errorf("%s: live_revision %d, want %d (%+v)", c.name, got, c.want, d.Rollout[0])
		}
	}
}

// sampling runs a dashboard over f that samples the traffic every sample
// (and rebuilds by the clock only hourly), serves it, and returns its event
// stream's documents; everything stops at the test's cleanup.
func sampling(t *testing.T, cli *clientv3.Client, f *fakeInputs, sample time.Duration) <-chan Doc {
	d := New(Options{Client: cli, Layout: layout, Inputs: f.get, Refresh: time.Hour, Sample: sample,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	srv := httptest.NewServer(d.Handler())
	sctx, scancel := context.WithCancel(context.Background())
	t.Cleanup(func() { scancel(); srv.Close() })
	docs, _ := events(t, sctx, srv.URL)
	return docs
}

func TestTrafficSeriesFromDemandReports(t *testing.T) {
	_, cli := etcdtest.New(t)
	f := &fakeInputs{}
	f.set(func(in *Inputs) {
		in.State = state()
		in.Rows = map[string]map[string]RowInput{"BFE1": {"c": {Row: snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 90, config.Blackhole: 10}}}}}
	})
	docs := sampling(t, cli, f, 20*time.Millisecond)

	// p1 and p2 report per-sub-cluster counts (report.Traffic), p3 does not
	// (an older proxy): the realised share is p1's and p2's answers together.
	for id, cd := range map[string]report.ClusterDemand{
		"p1": {RPS: 10, ErrorRPS: 1, BlackholeRPS: 2, Traffic: &report.Traffic{SubClusters: map[string]uint64{"SC1": 70, config.Blackhole: 30}}},
		"p2": {RPS: 5, BlackholeRPS: 0.5, Traffic: &report.Traffic{SubClusters: map[string]uint64{"SC1": 130}}},
		"p3": {RPS: 1},
	} {
		k, _ := layout.Demand("BFE1", id)
		b, _ := json.Marshal(report.Demand{ID: id, Clusters: map[string]report.ClusterDemand{"c": cd}, WindowSeconds: 10})
		if _, err := cli.Put(context.Background(), k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	doc := next(t, docs, 2*time.Second, "BFE1→c summed over both proxies", func(d Doc) bool {
		if len(d.Traffic) != 1 || len(d.Traffic[0].Points) == 0 {
			return false
		}
		p := d.Traffic[0].Points[len(d.Traffic[0].Points)-1]
		return p.RPS == 16 && p.ErrorRPS == 1 && p.BlackholeRPS == 2.5
	})
	s := doc.Traffic[0]
	if s.ProxyCluster != "BFE1" || s.Cluster != "c" {
		t.Fatalf("series %+v", s)
	}
	p := s.Points[len(s.Points)-1]
	if p.Answers != 230 || !reflect.DeepEqual(p.Realised, map[string]float64{"SC1": 86.96, config.Blackhole: 13.04}) ||
		!reflect.DeepEqual(p.Intended, map[string]float64{"SC1": 90, config.Blackhole: 10}) {
		t.Fatalf("answers %d, realised %v, intended %v; want 230, SC1 86.96 / BLACKHOLE 13.04 (200 and 30 of 230), intended 90/10", p.Answers, p.Realised, p.Intended)
	}
}

func TestTrafficWindow(t *testing.T) {
	tr := traffic{reports: map[string]report.Demand{"k": {ProxyCluster: "BFE1", Clusters: map[string]report.ClusterDemand{"c": {RPS: 1}}}},
		series: map[seriesKey][]TrafficPoint{}, keep: int(window / sampleEvery)}
	t0 := time.Unix(1_000_000, 0)
	for i := range 200 {
		tr.sampleLocked(t0.Add(time.Duration(i)*sampleEvery), nil)
	}
	pts := tr.listLocked()[0].Points
	if len(pts) != tr.keep || pts[len(pts)-1].T != t0.Add(199*sampleEvery).Unix() {
		t.Fatalf("%d points, last at %d", len(pts), pts[len(pts)-1].T)
	}
	// Nobody reports any more: the points age out after the window.
	tr.reports = map[string]report.Demand{}
	tr.sampleLocked(t0.Add(199*sampleEvery+window), nil)
	if got := tr.listLocked(); len(got) != 0 {
		t.Fatalf("series kept after the window: %+v", got[0].Points[:1])
	}
}

// The dashboard rebuilds when the clock alone changes a state: just after
// the first live status turns STALE or a last-seen record expires, at most
// after Refresh.
func TestNextFlip(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rec := records{
		sts: statuses{
			"a": {UpdatedAt: now.Add(-4 * time.Second), ReportIntervalSeconds: 5}, // STALE at +6 s
			"b": {UpdatedAt: now.Add(-time.Minute)},                               // already STALE
			"c": {},                                                               // no time
		},
		seen: statuses{"d": {UpdatedAt: now.Add(-report.GoneFor + 3*time.Second)}}, // drops at +3 s
	}
	if got := nextFlip(rec, now, 5*time.Second); got != 3*time.Second+10*time.Millisecond {
		t.Fatalf("nextFlip = %s, want 3.01s", got)
	}
	delete(rec.seen, "d")
	if got := nextFlip(rec, now, 5*time.Second); got != 5*time.Second {
		t.Fatalf("nextFlip = %s, want the 5s refresh", got)
	}
	if got := nextFlip(rec, now, 10*time.Second); got != 6*time.Second+10*time.Millisecond {
		t.Fatalf("nextFlip = %s, want 6.01s", got)
	}
}
