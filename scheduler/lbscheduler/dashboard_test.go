package lbscheduler

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/scheduler/internal/dashboard"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// startWithToken starts a scheduler on the test etcd with an API token
// ("" for none).
func startWithToken(t *testing.T, srv *etcdtest.Server, token string) *Scheduler {
	t.Helper()
	return startConfig(t, srv, Config{ID: "dash", APIAddr: "127.0.0.1:0", APIToken: token,
		SessionTTL: 2 * time.Second, Debounce: 10 * time.Millisecond, Logger: quietLogger()})
}

// stream follows /ui/events; every "state" event's document is sent on the
// returned channel until the test ends.
func stream(t *testing.T, s *Scheduler) <-chan dashboard.Doc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.APIAddr()+"/ui/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		cancel()
		resp.Body.Close()
		t.Fatalf("events: %d %s", resp.StatusCode, ct)
	}
	out := make(chan dashboard.Doc, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 8<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "state":
				var d dashboard.Doc
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &d); err != nil {
					t.Errorf("event data: %v", err)
					return
				}
				select {
				case out <- d:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return out
}

// await reads documents until cond accepts one, within d.
func await(t *testing.T, docs <-chan dashboard.Doc, d time.Duration, what string, cond func(dashboard.Doc) error) dashboard.Doc {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	last := fmt.Errorf("no document")
	for {
		select {
		case doc := <-docs:
			if last = cond(doc); last == nil {
				return doc
			}
		case <-deadline.C:
			t.Fatalf("within %s: %s: %v", d, what, last)
		}
	}
}

func cluster(d dashboard.Doc, name string) (dashboard.ClusterView, error) {
	for _, c := range d.Clusters {
		if c.Name == name {
			return c, nil
		}
	}
	return dashboard.ClusterView{}, fmt.Errorf("doc #%d has no cluster %s", d.Seq, name)
}

func row(d dashboard.Doc, cn, pc string) (dashboard.RowView, error) {
	c, err := cluster(d, cn)
	if err != nil {
		return dashboard.RowView{}, err
	}
	for _, r := range c.Rows {
		if r.ProxyCluster == pc {
			return r, nil
		}
	}
	return dashboard.RowView{}, fmt.Errorf("doc #%d: %s has no row %s", d.Seq, cn, pc)
}

type actionReq struct {
	token, csrf, origin string
}

func act(t *testing.T, s *Scheduler, r actionReq, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.APIAddr()+"/ui/api/action", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if r.csrf != "" {
		req.Header.Set(dashboard.CSRFHeader, r.csrf)
	}
	if r.origin != "" {
		req.Header.Set("Origin", r.origin)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("action answer %q: %v", b, err)
	}
	if m["error"] != "" {
		return resp.StatusCode, m["error"]
	}
	return resp.StatusCode, m["message"]
}

func desiredRev(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), layout.Desired())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("desired: %v %v", err, r)
	}
	return r.Kvs[0].ModRevision
}

func TestDashboardPageStateAndEvents(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "30s"))
	s := startWithToken(t, srv, "")

	code, page := get(t, s, "/ui/")
	if code != 200 || !strings.Contains(page, "<title>Sluice dashboard</title>") || !strings.Contains(page, `src="app.js"`) {
		t.Fatalf("GET /ui/: %d %.200s", code, page)
	}
	for _, a := range []string{"/ui/app.js", "/ui/style.css"} {
		if code, body := get(t, s, a); code != 200 || len(body) < 100 {
			t.Fatalf("GET %s: %d (%d bytes)", a, code, len(body))
		}
	}
	resp, err := http.Get("http://" + s.APIAddr() + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP = %q", csp)
	}

	docs := stream(t, s)
	d := await(t, docs, 10*time.Second, "the matrix of demo-main", func(d dashboard.Doc) error {
		c, err := cluster(d, "demo-main")
		if err != nil {
			return err
		}
		if len(c.SubClusters) != 2 || c.SubClusters[0].Name != "SC1" || c.SubClusters[0].IDC != "IDC1" || c.SubClusters[1].IDC != "IDC2" {
			return fmt.Errorf("sub-clusters %+v", c.SubClusters)
		}
		if len(c.Rows) != 2 || c.Rows[0].ProxyCluster != "BFE1" || c.Rows[1].ProxyCluster != "BFE2" {
			return fmt.Errorf("rows %+v", c.Rows)
		}
		if c.SubClusters[0].Available != 1 || c.SubClusters[0].Total != 1 {
			return fmt.Errorf("SC1 health %d/%d", c.SubClusters[0].Available, c.SubClusters[0].Total)
		}
		for _, r := range d.Rollout {
			if r.LiveVersion == 0 {
				return fmt.Errorf("%s not live yet", r.ProxyCluster)
			}
		}
		return nil
	})
	if d.Actions || !d.Ready || d.SchedulerID != "dash" {
		t.Fatalf("doc header: actions %v ready %v id %q", d.Actions, d.Ready, d.SchedulerID)
	}
	r, _ := row(d, "demo-main", "BFE1")
	if r.Explanation == nil || r.Explanation.Mode == "" || r.Weights[config.Blackhole] != 0 || r.Weights["SC1"]+r.Weights["SC2"] != r.Denominator {
		t.Fatalf("BFE1 row %+v", r)
	}
	// The same document over plain JSON.
	code, body := get(t, s, "/ui/api/state")
	var plain dashboard.Doc
	if code != 200 || json.Unmarshal([]byte(body), &plain) != nil || plain.Seq < d.Seq {
		t.Fatalf("GET /ui/api/state: %d seq %d (stream had %d)", code, plain.Seq, d.Seq)
	}

	// A proxy reports its status: the stream carries it within 2 s.
	live, lineage := d.Rollout[0].LiveVersion, d.Rollout[0].LiveLineage
	st, _ := json.Marshal(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedLineage: lineage, AppliedVersion: live, EtcdConnected: true, UpdatedAt: time.Now()})
	k, _ := layout.Status("BFE1", "p1")
	start := time.Now()
	put(t, cli, k, string(st))
	await(t, docs, 2*time.Second, "p1 SYNCED", func(d dashboard.Doc) error {
		for _, r := range d.Rollout {
			for _, p := range r.Proxies {
				if r.ProxyCluster == "BFE1" && p.ID == "p1" && p.State == dashboard.StateSynced && p.AppliedVersion == live {
					return nil
				}
			}
		}
		return fmt.Errorf("rollout %+v", d.Rollout)
	})
	t.Logf("status report → event in %s", time.Since(start))

	// A pin written to etcd (as lbctl does) shows within 2 s, marked.
	var stt config.State
	if err := json.Unmarshal([]byte(desired(0, "30s")), &stt); err != nil {
		t.Fatal(err)
	}
	stt.Pins = []config.Pin{{ProxyCluster: "BFE1", Cluster: "demo-main", Weights: map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}, Reason: "demo"}}
	raw, _ := json.Marshal(stt)
	start = time.Now()
	put(t, cli, layout.Desired(), string(raw))
	await(t, docs, 2*time.Second, "BFE1 pinned 45/45/10", func(d dashboard.Doc) error {
		r, err := row(d, "demo-main", "BFE1")
		if err != nil {
			return err
		}
		if !r.Pinned || r.PinReason != "demo" || r.Weights["SC1"] != 45 || r.Weights["SC2"] != 45 || r.Weights[config.Blackhole] != 10 {
			return fmt.Errorf("row %+v", r)
		}
		return nil
	})
	t.Logf("desired state → event in %s", time.Since(start))

	// The version history, and the rows that differ between two versions.
	// (The page shows a computed row before it is published.)
	var hist struct {
		Versions []struct {
			Version uint64 `json:"version"`
			Reason  string `json:"reason"`
		} `json:"versions"`
	}
	poll.Eventually(t, 20*time.Second, "BFE1's pinned version published", func() error {
		code, body := get(t, s, "/ui/api/history?proxy_cluster=BFE1")
		if err := json.Unmarshal([]byte(body), &hist); code != 200 || err != nil || len(hist.Versions) < 2 {
			return fmt.Errorf("history: %d %v %s", code, err, body)
		}
		return nil
	})
	newest := hist.Versions[len(hist.Versions)-1].Version
	code, body = get(t, s, fmt.Sprintf("/ui/api/diff?proxy_cluster=BFE1&from=1&to=%d", newest))
	var diff dashboard.Diff
	if err := json.Unmarshal([]byte(body), &diff); code != 200 || err != nil || len(diff.Rows) != 1 {
		t.Fatalf("diff v1..v%d: %d %v %s", newest, code, err, body)
	}
	if c := diff.Rows[0]; c.Cluster != "demo-main" || c.From == nil || c.From.Pinned || c.To == nil || !c.To.Pinned || c.To.Weights[config.Blackhole] != 10 {
		t.Fatalf("diff row %+v", c)
	}
	for _, c := range []struct {
		q    string
		code int
		msg  string
	}{
		{"proxy_cluster=BFE1&from=x&to=1", 400, `from "x": want a version number`},
		{"proxy_cluster=BFE1&from=1&to=999", 404, "BFE1 v999: "},
		{"proxy_cluster=&from=1&to=1", 400, "proxy_cluster: "},
	} {
		code, body := get(t, s, "/ui/api/diff?"+c.q)
		var e map[string]string
		_ = json.Unmarshal([]byte(body), &e)
		if code != c.code || !strings.HasPrefix(e["error"], c.msg) {
			t.Errorf("diff?%s: %d %s, want %d %q", c.q, code, body, c.code, c.msg)
		}
	}

	// A change no snapshot carries (a paused shift intent moves nothing):
	// nothing is published, the scheduler's own recomputation updates the page.
	sh := config.Shift{ID: "s-quiet", ProxyCluster: "BFE2", Cluster: "demo-main", From: "IDC2", To: "IDC1", Percent: 10,
		StepPercent: 10, State: config.ShiftPaused}
	b, _ := json.Marshal(sh)
	sk, _ := layout.Shift(sh.ID)
	start = time.Now()
	put(t, cli, sk, string(b))
	await(t, docs, 2*time.Second, "the paused shift", func(d dashboard.Doc) error {
		if len(d.Shifts) != 1 || d.Shifts[0].ID != "s-quiet" || d.Shifts[0].State != config.ShiftPaused {
			return fmt.Errorf("shifts %+v", d.Shifts)
		}
		return nil
	})
	t.Logf("shift intent → event in %s", time.Since(start))

	// Read-only: without a token the scheduler refuses every action, even
	// well-formed ones from the page, and changes nothing.
	rev := desiredRev(t, cli)
	code, msg := act(t, s, actionReq{csrf: "1", token: "x"}, `{"kind":"drain","cluster":"demo-main","subcluster":"SC2"}`)
	if code != http.StatusForbidden || !strings.Contains(msg, "read-only") {
		t.Fatalf("action on a read-only dashboard: %d %q", code, msg)
	}
	if got := desiredRev(t, cli); got != rev {
		t.Fatalf("a refused action wrote the desired state: revision %d → %d", rev, got)
	}
}

func TestDashboardActions(t *testing.T) {
	srv, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired(0, "30s"))
	s := startWithToken(t, srv, "s3cret")
	docs := stream(t, s)
	d := await(t, docs, 10*time.Second, "the matrix", func(d dashboard.Doc) error { _, err := row(d, "demo-main", "BFE1"); return err })
	if !d.Actions {
		t.Fatal("doc.actions is false with a token")
	}
	// The pages are read-only without the token.
	if code, _ := get(t, s, "/ui/api/state"); code != 200 {
		t.Fatalf("state without token: %d", code)
	}
	drain := `{"kind":"drain","cluster":"demo-main","subcluster":"SC2","reason":"idc maintenance"}`
	rev := desiredRev(t, cli)
	for _, c := range []struct {
		name string
		req  actionReq
		code int
		msg  string
	}{
		{"no token", actionReq{csrf: "1"}, http.StatusUnauthorized, "missing or wrong bearer token"},
		{"wrong token", actionReq{csrf: "1", token: "nope"}, http.StatusUnauthorized, "missing or wrong bearer token"},
		{"no CSRF header", actionReq{token: "s3cret"}, http.StatusForbidden, "cross-site request refused"},
		{"other origin", actionReq{token: "s3cret", csrf: "1", origin: "http://evil.example"}, http.StatusForbidden, "cross-site request refused"},
	} {
		code, msg := act(t, s, c.req, drain)
		if code != c.code || !strings.HasPrefix(msg, c.msg) {
			t.Errorf("%s: %d %q, want %d %q", c.name, code, msg, c.code, c.msg)
		}
	}
	if got := desiredRev(t, cli); got != rev {
		t.Fatalf("refused actions wrote the desired state: revision %d → %d", rev, got)
	}

	ok := actionReq{token: "s3cret", csrf: "1", origin: "http://" + s.APIAddr()}
	code, msg := act(t, s, ok, drain)
	// What was written, and that it is not live yet (the page then watches
	// the revision until every proxy runs it).
	if want := fmt.Sprintf("Drained demo-main/SC2 (desired state revision %d). Written to the desired state only: "+
		"not live until the scheduler publishes it and the proxies apply it.", desiredRev(t, cli)); code != 200 || msg != want {
		t.Fatalf("drain: %d %q, want %q", code, msg, want)
	}
	start := time.Now()
	await(t, docs, 2*time.Second, "SC2 drained", func(d dashboard.Doc) error {
		c, err := cluster(d, "demo-main")
		if err != nil {
			return err
		}
		if sc := c.SubClusters[1]; !sc.Drained || sc.DrainReason != "idc maintenance" || !strings.HasPrefix(sc.DrainAuthor, "dashboard@") {
			return fmt.Errorf("SC2 %+v", sc)
		}
		return nil
	})
	t.Logf("drain action → event in %s", time.Since(start))

	// The same refusals, in the same words, as lbctl (api/edit).
	rev = desiredRev(t, cli)
	for _, c := range []struct {
		body string
		code int
		msg  string
	}{
		{drain, 400, "demo-main/SC2 is already drained"},
		{`{"kind":"undrain","cluster":"demo-main","subcluster":"SC1"}`, 400, "demo-main/SC1 is not drained"},
		{`{"kind":"unpin","cluster":"demo-main","proxy_cluster":"BFE1"}`, 400, `no pinned row for cluster "demo-main" and proxy cluster "BFE1"`},
		{`{"kind":"pin","cluster":"demo-main","proxy_cluster":"BFE1","weights":{"SC1":50,"SC2":45}}`, 400, "invalid change; nothing was written:\nrow BFE1 of demo-main: weights sum to 95, want exactly 100"},
		{`{"kind":"shift-pause","id":"nope"}`, 404, `no shift "nope"; nothing was written`},
		{`{"kind":"explode"}`, 400, `action kind "explode"`},
		{`{"kind":"drain","cluster":"demo-main","subcluster":"SC2","extra":1}`, 400, "action body: "},
	} {
		code, msg := act(t, s, ok, c.body)
		if code != c.code || !strings.HasPrefix(msg, c.msg) {
			t.Errorf("%s: %d %q, want %d %q", c.body, code, msg, c.code, c.msg)
		}
	}
	if got := desiredRev(t, cli); got != rev {
		t.Fatalf("refused actions wrote the desired state: revision %d → %d", rev, got)
	}

	code, msg = act(t, s, ok, `{"kind":"pin","cluster":"demo-main","proxy_cluster":"BFE1","weights":{"SC1":45,"SC2":45,"GSLB_BLACKHOLE":10},"reason":"demo"}`)
	if code != 200 || !strings.HasPrefix(msg, "Pinned BFE1 row of demo-main to SC1=45 SC2=45 GSLB_BLACKHOLE=10 (desired state revision ") {
		t.Fatalf("pin: %d %q", code, msg)
	}
	await(t, docs, 2*time.Second, "BFE1 pinned", func(d dashboard.Doc) error {
		r, err := row(d, "demo-main", "BFE1")
		if err != nil || !r.Pinned || r.Weights[config.Blackhole] != 10 {
			return fmt.Errorf("row %+v %v", r, err)
		}
		return nil
	})
	// SC2 is drained: draining SC1 too leaves BFE1's pinned row nothing but
	// GSLB_BLACKHOLE, which the scheduler could not publish. Refused as
	// lbctl refuses it (scheduler/precheck), in its words but the override,
	// which is the page's (the drain dialog's box); nothing written.
	rev = desiredRev(t, cli)
	code, msg = act(t, s, ok, `{"kind":"drain","cluster":"demo-main","subcluster":"SC1","reason":"idc maintenance"}`)
	if want := "refused: the scheduler could not publish the drain of demo-main/SC1; nothing was written:\n" +
		"  proxy cluster BFE1, cluster demo-main: its pinned row would send every request to GSLB_BLACKHOLE (nothing left to serve it)\n" +
		"  proxy cluster BFE1: clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it\n" +
		`To drop all that traffic on purpose, tick "allow a full drop" and send the drain again.`; code != http.StatusBadRequest || msg != want {
		t.Errorf("drain of the last sub-cluster: %d %q\nwant 400 %q", code, msg, want)
	}
	if got := desiredRev(t, cli); got != rev {
		t.Fatalf("the refused drain wrote the desired state: revision %d → %d", rev, got)
	}
	for _, body := range []string{`{"kind":"unpin","cluster":"demo-main","proxy_cluster":"BFE1"}`, `{"kind":"undrain","cluster":"demo-main","subcluster":"SC2"}`} {
		if code, msg := act(t, s, ok, body); code != 200 {
			t.Fatalf("%s: %d %q", body, code, msg)
		}
	}
	await(t, docs, 2*time.Second, "unpinned and undrained", func(d dashboard.Doc) error {
		r, err := row(d, "demo-main", "BFE1")
		c, _ := cluster(d, "demo-main")
		if err != nil || r.Pinned || c.SubClusters[1].Drained {
			return fmt.Errorf("row %+v, SC2 %+v", r, c.SubClusters[1])
		}
		return nil
	})

	// Shift pause/resume/abort, with compare-and-swap on the intent.
	sh := config.Shift{ID: "s-1", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2", Percent: 30,
		Ramp: config.Duration(time.Hour), StepPercent: 10, State: config.ShiftPending}
	b, _ := json.Marshal(sh)
	sk, _ := layout.Shift("s-1")
	put(t, cli, sk, string(b))
	for _, c := range []struct{ kind, state string }{{"shift-pause", config.ShiftPaused}, {"shift-resume", config.ShiftRunning}, {"shift-abort", config.ShiftAborted}} {
		code, msg := act(t, s, ok, `{"kind":"`+c.kind+`","id":"s-1"}`)
		r, err := cli.Get(context.Background(), sk)
		if err != nil {
			t.Fatal(err)
		}
		// The revision of the write to the intent, which the page follows.
		if want := fmt.Sprintf("Shift s-1 is now %s (revision %d). Not live until the scheduler runs it and the proxies of BFE1 apply it.",
			c.state, r.Kvs[0].ModRevision); code != 200 || msg != want {
			t.Fatalf("%s: %d %q\nwant 200 %q", c.kind, code, msg, want)
		}
		poll.Eventually(t, 10*time.Second, "shift intent "+c.state, func() error {
			r, err := cli.Get(context.Background(), sk)
			if err != nil {
				return err
			}
			var got config.Shift
			if err := json.Unmarshal(r.Kvs[0].Value, &got); err != nil || got.State != c.state {
				return fmt.Errorf("state %q %v", got.State, err)
			}
			return nil
		})
	}
	if code, msg := act(t, s, ok, `{"kind":"shift-resume","id":"s-1"}`); code != 400 || msg != "shift s-1 is aborted: cannot resume it; nothing was written" {
		t.Fatalf("resume an aborted shift: %d %q", code, msg)
	}
}
