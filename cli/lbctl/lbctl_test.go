package lbctl

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestMain checks for leaked goroutines. The tests that run a real lbproxy
// leave two fasthttp goroutines that are not ours to stop (as in lbproxy's
// own tests): the process-wide Date-header updater and a stopped worker
// pool's cleaner, which notices the stop only after a sleep.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}

// harness runs lbctl in-process against one embedded etcd.
type harness struct {
	t      *testing.T
	srv    *etcdtest.Server
	cli    *clientv3.Client
	layout keys.Layout
}

func newHarness(t *testing.T) *harness {
	srv, cli := etcdtest.New(t)
	return &harness{t: t, srv: srv, cli: cli, layout: keys.MustNew("")}
}

// run executes lbctl with args and returns stdout, stderr and the exit code.
func (h *harness) run(stdin string, args ...string) (string, string, int) {
	h.t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"lbctl", "--endpoints", strings.Join(h.srv.Endpoints, ",")}, args...)
	code := Main(full, &out, &errb, strings.NewReader(stdin))
	return out.String(), errb.String(), code
}

func (h *harness) mustRun(args ...string) string {
	h.t.Helper()
	out, errs, code := h.run("", args...)
	if code != 0 {
		h.t.Fatalf("lbctl %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errs)
	}
	return out
}

func (h *harness) applyDemo() {
	h.t.Helper()
	h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes")
}

func (h *harness) desired() (config.State, int64) {
	h.t.Helper()
	r, err := h.cli.Get(context.Background(), h.layout.Desired())
	if err != nil || len(r.Kvs) == 0 {
		h.t.Fatalf("desired state: %v", err)
	}
	var s config.State
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &s); err != nil {
		h.t.Fatal(err)
	}
	return s, r.Kvs[0].ModRevision
}

// publish writes a snapshot the way the scheduler does.
func (h *harness) publish(s *snapshot.Snapshot) {
	h.t.Helper()
	s.Meta.Hash = snapshot.ContentHash(s)
	m, parts, err := snapshot.Encode(s)
	if err != nil || len(parts) > 0 {
		h.t.Fatalf("encode: %v", err)
	}
	mk, _ := h.layout.Snapshot(s.Meta.ProxyCluster, s.Meta.Version)
	ck, _ := h.layout.Current(s.Meta.ProxyCluster)
	mj, _ := json.Marshal(m)
	pj, _ := json.Marshal(snapshot.Pointer{Version: s.Meta.Version, Hash: s.Meta.Hash})
	if _, err := h.cli.Txn(context.Background()).Then(clientv3.OpPut(mk, string(mj)), clientv3.OpPut(ck, string(pj))).Commit(); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) status(st report.ProxyStatus) {
	h.t.Helper()
	k, _ := h.layout.Status(st.ProxyCluster, st.ID)
	b, _ := json.Marshal(st)
	if _, err := h.cli.Put(context.Background(), k, string(b)); err != nil {
		h.t.Fatal(err)
	}
}

func demoSnapshot(pc string, v uint64, row map[string]int, pinned bool) *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: pc, Version: v, Parent: v - 1, Author: "test", CreatedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {Rules: []config.Rule{{Cond: "default_t()", Cluster: "demo-main"}}}},
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 18001, Weight: 10}}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{{Addr: "127.0.0.1", Port: 18002, Weight: 10}}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: row, Pinned: pinned},
		}},
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s--- want\n%s", name, got, want)
	}
}

func TestApplyValidatesDiffsAndWrites(t *testing.T) {
	h := newHarness(t)
	out := h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes")
	if !strings.Contains(out, "+ clusters:") || !strings.Contains(out, "Applied: desired state is now at revision") {
		t.Fatalf("apply output:\n%s", out)
	}
	s, _ := h.desired()
	if len(s.Clusters) != 3 || s.Pins[0].Weights["SC1"] != 45 {
		t.Fatalf("stored state %+v", s)
	}
	// Same file again: no changes, nothing written.
	_, rev := h.desired()
	out = h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes")
	if !strings.Contains(out, "No changes") {
		t.Fatalf("second apply: %s", out)
	}
	if _, rev2 := h.desired(); rev2 != rev {
		t.Fatalf("second apply wrote: revision %d → %d", rev, rev2)
	}
	// Declining the confirmation writes nothing and exits 5.
	mod := strings.Replace(mustRead(t, "testdata/demo.yaml"), "instance_grace: 5s", "instance_grace: 7s", 1)
	f := filepath.Join(t.TempDir(), "mod.yaml")
	os.WriteFile(f, []byte(mod), 0o644)
	out, _, code := h.run("n\n", "apply", "-f", f)
	if code != ExitAborted || !strings.Contains(out, "- ") || !strings.Contains(out, "instance_grace: 7s") {
		t.Fatalf("declined apply: exit %d\n%s", code, out)
	}
	if _, rev2 := h.desired(); rev2 != rev {
		t.Fatal("declined apply wrote")
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyRejectsInvalidFile(t *testing.T) {
	h := newHarness(t)
	bad := strings.Replace(mustRead(t, "testdata/demo.yaml"), "SC1: 45", "SC1: 1.5", 1)
	f := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(f, []byte(bad), 0o644)
	_, errs, code := h.run("", "apply", "-f", f, "--yes")
	if code != ExitError || !strings.Contains(errs, "pins[0].weights.SC1") {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
	r, _ := h.cli.Get(context.Background(), h.layout.Desired())
	if len(r.Kvs) != 0 {
		t.Fatal("invalid apply wrote the desired state")
	}
}

// Two applies based on the same revision (what two operators editing at the
// same time do): exactly one wins, the other is told about the conflict and
// writes nothing. They run one after the other because urfave/cli's
// package-level flags are not safe for two in-process runs at once; the
// outcome does not depend on timing since both compare against one revision.
func TestApplyConflict(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	dir := t.TempDir()
	var files []string
	for i, g := range []string{"6s", "8s"} {
		f := filepath.Join(dir, "v"+string(rune('a'+i))+".yaml")
		os.WriteFile(f, []byte(strings.Replace(mustRead(t, "testdata/demo.yaml"), "instance_grace: 5s", "instance_grace: "+g, 1)), 0o644)
		files = append(files, f)
	}
	_, errA, codeA := h.run("", "apply", "-f", files[0], "--yes", "--expect-revision", itoa(rev))
	_, errB, codeB := h.run("", "apply", "-f", files[1], "--yes", "--expect-revision", itoa(rev))
	if codeA != ExitOK {
		t.Fatalf("first apply: exit %d: %s", codeA, errA)
	}
	if codeB != ExitConflict || !strings.Contains(errB, "conflict") || !strings.Contains(errB, "nothing was written") {
		t.Fatalf("second apply: exit %d: %s", codeB, errB)
	}
	if s, _ := h.desired(); s.Scheduler.InstanceGrace.D() != 6*time.Second {
		t.Fatalf("stored instance_grace %s: the loser overwrote the winner", s.Scheduler.InstanceGrace)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestWeightsSetRejectsBadSpecsBeforeWriting(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"SC1=-1", "SC2=101"}, "SC1: weight -1 is outside 0..100"},
		{[]string{"SC1=101"}, "SC1: weight 101 is outside 0..100"},
		{[]string{"SC1=abc", "SC2=100"}, `SC1: weight "abc" is not an integer`},
		{[]string{"SC1=50", "SC9=50"}, "SC9"},
		{[]string{"GSLB_BLACKHOLE=100"}, "GSLB_BLACKHOLE"},
		{[]string{"SC1=50", "SC2=40"}, "sum"},
		{[]string{"SC1"}, "want SUBCLUSTER=WEIGHT"},
	}
	for _, c := range cases {
		args := append([]string{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "--reason", "test"}, c.args...)
		_, errs, code := h.run("", args...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to mention %q", c.args, code, errs, c.want)
		}
	}
	if _, rev2 := h.desired(); rev2 != rev {
		t.Fatalf("a rejected weights set wrote (revision %d → %d)", rev, rev2)
	}
	h.mustRun("weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=20", "SC2=80", "--reason", "ok")
	s, _ := h.desired()
	found := false
	for _, p := range s.Pins {
		if p.ProxyCluster == "BFE2" && p.Weights["SC1"] == 20 && p.Weights["SC2"] == 80 && p.Reason == "ok" {
			found = true
		}
	}
	if !found {
		t.Fatalf("pin not stored: %+v", s.Pins)
	}
	h.mustRun("weights", "unpin", "--cluster", "demo-main", "--proxy-cluster", "BFE2")
	s, _ = h.desired()
	if len(s.Pins) != 1 {
		t.Fatalf("unpin left %+v", s.Pins)
	}
}

func TestWeightsGetTableAndJSON(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 3, map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}, true))
	h.publish(demoSnapshot("BFE2", 7, map[string]int{"SC1": 20, "SC2": 80, config.Blackhole: 0}, false))
	golden(t, "weights-get", h.mustRun("weights", "get", "--cluster", "demo-main"))
	var m matrix
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "weights", "get")), &m); err != nil {
		t.Fatal(err)
	}
	r := m.Clusters["demo-main"].Rows["BFE1"]
	if r.Version != 3 || !r.Pinned || r.Weights["SC1"] != 45 || r.Weights[config.Blackhole] != 10 {
		t.Fatalf("json row %+v", r)
	}
}

func TestRolloutStatus(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	now := time.Now().UTC()
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now})
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedVersion: 3, EtcdConnected: true, UpdatedAt: now})

	// p2 lags: not converged, exit 4, p2 named.
	out, errs, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE1")
	if code != ExitNotConverged || !strings.Contains(errs, "BFE1/p2 PENDING") || !strings.Contains(out, "PENDING") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	// --wait returns 0 once p2 catches up.
	done := make(chan struct{})
	var wout string
	var wcode int
	go func() {
		defer close(done)
		wout, _, wcode = h.run("", "rollout", "status", "--proxy-cluster", "BFE1", "--wait", "--wait-timeout", "30s")
	}()
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedVersion: 4, EtcdConnected: true, UpdatedAt: now})
	<-done
	if wcode != 0 || !strings.Contains(wout, "converged") {
		t.Fatalf("rollout --wait: exit %d\n%s", wcode, wout)
	}
	// A proxy rejecting the next version: --wait fails naming it and the reason.
	h.publish(demoSnapshot("BFE1", 5, map[string]int{"SC1": 60, "SC2": 40}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 5, EtcdConnected: true, UpdatedAt: now})
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p2", AppliedVersion: 4, RejectedVersion: 5, RejectedReason: "clusters.demo-main.row: weights sum to 90", EtcdConnected: true, UpdatedAt: now})
	out, errs, code = h.run("", "rollout", "status", "--proxy-cluster", "BFE1", "--wait", "--wait-timeout", "2s")
	if code != ExitNotConverged || !strings.Contains(errs, "BFE1/p2 REJECTED (clusters.demo-main.row: weights sum to 90)") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	golden(t, "rollout-rejected", out)
}

func TestDrainUndrain(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "maintenance")
	s, _ := h.desired()
	if len(s.Drains) != 1 || s.Drains[0].SubCluster != "SC1" {
		t.Fatalf("drains %+v", s.Drains)
	}
	if _, errs, code := h.run("", "drain", "--cluster", "demo-main", "--subcluster", "SC1"); code == 0 || !strings.Contains(errs, "already drained") {
		t.Fatalf("double drain: %d %s", code, errs)
	}
	if _, errs, code := h.run("", "drain", "--cluster", "demo-main", "--subcluster", "NOPE"); code == 0 || !strings.Contains(errs, "NOPE") {
		t.Fatalf("unknown sub-cluster: %d %s", code, errs)
	}
	h.mustRun("undrain", "--cluster", "demo-main", "--subcluster", "SC1")
	if s, _ := h.desired(); len(s.Drains) != 0 {
		t.Fatalf("drains after undrain %+v", s.Drains)
	}
}

func TestShiftCreateAndControl(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	if _, errs, code := h.run("", "shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC9", "--percent", "30"); code == 0 || !strings.Contains(errs, "IDC9") {
		t.Fatalf("bad shift: %d %s", code, errs)
	}
	out := h.mustRun("shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2", "--percent", "30", "--ramp", "5m", "--step", "10")
	id := strings.Fields(strings.TrimPrefix(out, "Shift "))[0]
	k, _ := h.layout.Shift(id)
	r, err := h.cli.Get(context.Background(), k)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("shift %s not stored: %v", id, err)
	}
	var sh config.Shift
	codec.UnmarshalJSON(r.Kvs[0].Value, &sh)
	if sh.Percent != 30 || sh.From != "IDC1" || sh.State != config.ShiftPending || sh.Ramp.D() != 5*time.Minute {
		t.Fatalf("stored %+v", sh)
	}
	h.mustRun("shift", "pause", "--id", id)
	r, _ = h.cli.Get(context.Background(), k)
	codec.UnmarshalJSON(r.Kvs[0].Value, &sh)
	if sh.State != config.ShiftPaused {
		t.Fatalf("state %s", sh.State)
	}
	h.mustRun("shift", "abort", "--id", id)
	if _, errs, code := h.run("", "shift", "resume", "--id", id); code == 0 || !strings.Contains(errs, "aborted") {
		t.Fatalf("resume aborted: %d %s", code, errs)
	}
}

func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	if _, _, code := h.run("", "no-such-command"); code != ExitUsage {
		t.Fatalf("unknown command exit %d", code)
	}
	if _, _, code := h.run("", "weights", "set"); code != ExitUsage {
		t.Fatalf("missing flags exit %d", code)
	}
	if _, _, code := h.run("", "-o", "xml", "version"); code != ExitUsage {
		t.Fatalf("bad -o exit %d", code)
	}
}
