//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	rs "github.com/sluicelb/sluice/api/rollout"
	"github.com/sluicelb/sluice/integration/fleet"
)

// stagedBake is each stage's bake in these scenarios.
const stagedBake = 6 * time.Second

// stagedFleet starts the fleet with proxies reporting every second, pins
// BFE1's demo-main to SC1 (no policy yet: at once), then adds BFE1's
// rollout policy: one proxy, then all, each baking stagedBake.
func stagedFleet(t *testing.T, proxyEnv ...string) *fleet.Fleet {
	t.Helper()
	f := startFleet(t, fleet.Options{ProxyEnv: append([]string{"SLUICE_REPORT_INTERVAL=1s"}, proxyEnv...)})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	state := strings.Replace(string(fleet.DemoState), "weights: {SC1: 45, SC2: 45, GSLB_BLACKHOLE: 10}", "weights: {SC1: 100}", 1)
	applyState(t, f, state)
	policy := fmt.Sprintf(`BFE1: {idc: IDC1, trusted_proxies: ["127.0.0.0/8"], rollout: {stages: [{count: 1, bake: %s}, {percent: 100, bake: %s}], gates: {apply_timeout: 20s, min_requests: 10}}}`,
		stagedBake, stagedBake)
	applyState(t, f, strings.Replace(state, `BFE1: {idc: IDC1, trusted_proxies: ["127.0.0.0/8"]}`, policy, 1))
	return f
}

func applyState(t *testing.T, f *fleet.Fleet, state string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.yaml")
	if err := os.WriteFile(path, []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code, err := f.Lbctl(ctx, "apply", "-f", path, "--yes", "--wait", "--wait-timeout", "50s")
	if err != nil || code != 0 {
		t.Fatalf("lbctl apply: exit %d, %v\n%s", code, err, out)
	}
}

// stagedRecord reads BFE1's rollout record.
func stagedRecord(ctx context.Context, f *fleet.Fleet) (rs.Staged, error) {
	k, _ := f.Layout.Rollout("BFE1")
	r, err := f.Client.Get(ctx, k)
	if err != nil || len(r.Kvs) == 0 {
		return rs.Staged{}, fmt.Errorf("no rollout record (%v)", err)
	}
	var rec rs.Staged
	return rec, json.Unmarshal(r.Kvs[0].Value, &rec)
}

func waitStaged(t *testing.T, f *fleet.Fleet, timeout time.Duration, what string, ok func(rs.Staged) bool) rs.Staged {
	t.Helper()
	var rec rs.Staged
	eventually(t, timeout, what, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if rec, err = stagedRecord(ctx, f); err != nil {
			return err
		}
		if !ok(rec) {
			return fmt.Errorf("rollout %s is %s in stage %d: %s", rec.ID, rec.State, rec.Stage+1, rec.Reason)
		}
		return nil
	})
	return rec
}

// trafficLoop sends requests to every BFE1 proxy until stop is called.
func trafficLoop(f *fleet.Fleet) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, p := range f.ProxiesOf("BFE1") {
		for j := range 2 {
			wg.Add(1)
			go func(url string, ip int) {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					do(http.MethodGet, url+"/", fmt.Sprintf("10.%d.%d.%d", ip, n/250%250, n%250))
				}
			}(p.URL, i*2+j)
		}
	}
	return func() { cancel(); wg.Wait() }
}

// appliedInLog reports whether a proxy's log says it applied version v.
func appliedInLog(t *testing.T, p *fleet.Proxy, v uint64) bool {
	t.Helper()
	b, err := os.ReadFile(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "snapshot applied") &&
			(strings.Contains(line, fmt.Sprintf(`"version":%d,`, v)) || strings.Contains(line, fmt.Sprintf(" version=%d ", v))) {
			return true
		}
	}
	return false
}

// appliedInStage checks in a proxy's log that it applied version v first
// after the pointer put it in stage (0-based), never before.
func appliedInStage(p *fleet.Proxy, v uint64, stage int) error {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err
	}
	inStage := fmt.Sprintf(`"stage":%d,"in_stage":true`, stage)
	seen := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, `"msg":"staged rollout"`) && strings.Contains(line, inStage):
			seen = true
		case strings.Contains(line, `"msg":"snapshot applied"`) && strings.Contains(line, fmt.Sprintf(`"version":%d,`, v)):
			if !seen {
				return fmt.Errorf("%s applied v%d before stage %d selected it", p.ID, v, stage+1)
			}
			return nil
		}
	}
	return fmt.Errorf("%s never applied v%d", p.ID, v)
}

// A good change goes through both stages: the canary alone runs it during
// the first, every proxy after; lbctl --wait waits for the whole rollout.
func TestRolloutStagedGoodChangePromoted(t *testing.T) {
	f := stagedFleet(t)
	stop := trafficLoop(f)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type res struct {
		out  string
		code int
		err  error
	}
	done := make(chan res, 1)
	go func() {
		out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=90", "SC2=10",
			"--reason", "e2e good change", "--wait", "--wait-timeout", "90s")
		done <- res{out, code, err}
	}()
	rec := waitStaged(t, f, 30*time.Second, "stage 1 selected", func(r rs.Staged) bool {
		return r.Active() && r.Stage == 0 && len(r.Selected) == 1
	})
	canary := rec.Selected[0]
	rec = waitStaged(t, f, 60*time.Second, "promoted", func(r rs.Staged) bool { return r.State == rs.StageDone })
	r := <-done
	if r.err != nil || r.code != 0 {
		t.Fatalf("lbctl weights set --wait: exit %d, %v\n%s", r.code, r.err, r.out)
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != rec.CandidateVersion {
		t.Fatalf("BFE1 runs v%d after the rollout, want the candidate v%d", v, rec.CandidateVersion)
	}
	// Each proxy applied the candidate only once its stage selected it:
	// its log says so in order (configwatch logs the stage, then applies).
	for _, p := range f.ProxiesOf("BFE1") {
		stage := 1
		if p.ID == canary {
			stage = 0
		}
		if err := appliedInStage(p, rec.CandidateVersion, stage); err != nil {
			t.Fatal(err)
		}
	}
	out, code, err := f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE1")
	if err != nil || code != 0 || !strings.Contains(out, "ROLLOUT "+rec.ID) || !strings.Contains(out, "DONE stage 2/2") {
		t.Fatalf("rollout status: exit %d, %v\n%s", code, err, out)
	}
	t.Logf("rollout status:\n%s", out)
}

// A change that sends BFE1's traffic to failing backends is rolled back by
// the 5xx gate within bake + 5 s; the proxy outside the stage never applied
// it; rollout status and the waiting write say why (exit 4).
func TestRolloutStagedBadChangeRolledBack(t *testing.T) {
	f := stagedFleet(t)
	for _, b := range f.BackendsOf("demo-main", "SC2") {
		resp, err := http.Post("http://"+b.Addr+"/admin/fault?percent=100&status=500", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	stop := trafficLoop(f)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=0", "SC2=100",
		"--reason", "e2e bad change", "--wait", "--wait-timeout", "90s")
	if err != nil || code != 4 || !strings.Contains(out+"", "rolled back") {
		t.Fatalf("lbctl weights set --wait: exit %d (want 4), %v\n%s", code, err, out)
	}
	rec := waitStaged(t, f, 10*time.Second, "rolled back", func(r rs.Staged) bool { return r.State == rs.StageRolledBack })
	if rec.FailedGate != "5xx" || rec.Stage != 0 || rec.RollbackVersion <= rec.CandidateVersion {
		t.Fatalf("record %+v, want the 5xx gate of stage 1 and a rollback version above the candidate", rec)
	}
	took := rec.EndedAt.Sub(rec.BakeStarted)
	if took > stagedBake+5*time.Second {
		t.Fatalf("rolled back %s after the bake started, want within bake + 5s", took)
	}
	t.Logf("rolled back %s after the bake started (canary applied v%d at stage start %s)", took, rec.CandidateVersion, rec.StageStarted.Format(time.RFC3339Nano))
	for _, p := range f.ProxiesOf("BFE1") {
		if ran := appliedInLog(t, p, rec.CandidateVersion); ran != (p.ID == rec.Selected[0]) {
			t.Fatalf("%s applied the candidate v%d: %v (selected %v)", p.ID, rec.CandidateVersion, ran, rec.Selected)
		}
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != rec.RollbackVersion {
		t.Fatalf("BFE1 runs v%d, want the rollback v%d", v, rec.RollbackVersion)
	}
	out, code, err = f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE1")
	if err != nil || code != 4 || !strings.Contains(out, "ROLLED_BACK") || !strings.Contains(out, "gate 5xx") {
		t.Fatalf("rollout status: exit %d (want 4: the inputs are held), %v\n%s", code, err, out)
	}
	t.Logf("rollout status:\n%s", out)
}

// fault sets every backend of demo-main/sub to fail percent of its answers.
func fault(t *testing.T, f *fleet.Fleet, sub string, percent int) {
	t.Helper()
	for _, b := range f.BackendsOf("demo-main", sub) {
		resp, err := http.Post(fmt.Sprintf("http://%s/admin/fault?percent=%d&status=500", b.Addr, percent), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("fault on %s: %s", b.Addr, resp.Status)
		}
	}
}

// startChange pins BFE1's demo-main row to weights (no --wait) and returns
// the rollout once stage 1 bakes.
func startChange(t *testing.T, f *fleet.Fleet, weights ...string) rs.Staged {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1"}, weights...)
	if out, code, err := f.Lbctl(ctx, append(args, "--reason", "e2e staged")...); err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d, %v\n%s", code, err, out)
	}
	return waitStaged(t, f, 30*time.Second, "stage 1 baking", func(r rs.Staged) bool { return r.State == rs.StageBaking && r.Stage == 0 })
}

// A 5xx burst on every BFE1 proxy during the bake (the stable sub-cluster
// fails too) is not blamed on the canary: the rollout is promoted, with the
// default gates. The canary (SC1 90 %) expects 27 % 5xx and the stable
// proxies (SC1 100 %) 30 %, each over some 300 answers of a report window on
// a loaded machine (tens of thousands on an idle one): which proxy's
// requests meet a backend's failing answers is drawn by their interleaving,
// a binomial spread of ±2.6 points each, which a plain 2-point margin
// mistook for the canary's now and then (seen: 32.5 % against 30.5 %, with
// margin_5xx: 0.15 as the workaround). The gate now tests the difference at
// confidence_5xx 0.99 over the bake: even a bake of one judgement (z >
// 2.33) fails the canary only some 10.6 points over the stable ratio at 300
// answers a side, 13.6 over what it expects, 3.7 standard deviations: about
// 1e-4 per judgement (a longer bake asks each judgement for more standard
// errors; more answers make the same points more of them).
// Its 27 % is still far over the 5 % limit alone, so only the comparison
// with the stable proxies passes it.
func TestRolloutStagedFleetWideBurstNotBlamed(t *testing.T) {
	f := stagedFleet(t)
	stop := trafficLoop(f)
	defer stop()
	fault(t, f, "SC1", 30)
	rec := startChange(t, f, "SC1=90", "SC2=10")
	rec = waitStaged(t, f, 60*time.Second, "promoted despite the burst", func(r rs.Staged) bool {
		return !r.Active()
	})
	if rec.State != rs.StageDone {
		t.Fatalf("rollout %s ended %s: %s; want DONE (the stable proxies failed as much)", rec.ID, rec.State, rec.Reason)
	}
	for _, g := range rec.Gates {
		t.Logf("last judgement: gate %s: %s", g.Name, g.Detail)
	}
}

// Pause holds stage 1 past its bake; resume continues; abort republishes
// the stable content to every proxy.
func TestRolloutStagedPauseResumeAbort(t *testing.T) {
	f := stagedFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := startChange(t, f, "SC1=90", "SC2=10")
	if out, code, err := f.Lbctl(ctx, "rollout", "pause", "--proxy-cluster", "BFE1"); err != nil || code != 0 {
		t.Fatalf("rollout pause: exit %d, %v\n%s", code, err, out)
	}
	paused := waitStaged(t, f, 10*time.Second, "paused", func(r rs.Staged) bool { return r.State == rs.StagePaused })
	// Held in stage 1: every proxy reports the rollout, whether it is in
	// the stage, and the version its stage runs.
	eventually(t, 10*time.Second, "the proxies report stage 1", func() error {
		sts, err := statuses(ctx, f, "BFE1")
		if err != nil {
			return err
		}
		for _, p := range f.ProxiesOf("BFE1") {
			st, canary := sts[p.ID], p.ID == rec.Selected[0]
			want := rec.StableVersion
			if canary {
				want = rec.CandidateVersion
			}
			if st.AppliedVersion != want || st.PointerVersion != want || st.InStage != canary || st.Rollout != rec.ID || st.RolloutStage != 0 {
				return fmt.Errorf("%s reports v%d (pointer v%d) in_stage=%v rollout %q, want v%d in_stage=%v rollout %s",
					p.ID, st.AppliedVersion, st.PointerVersion, st.InStage, st.Rollout, want, canary, rec.ID)
			}
		}
		return nil
	})
	// Wait out more than the bake: a paused rollout does not move.
	deadline := time.Now().Add(stagedBake + 2*time.Second)
	for time.Now().Before(deadline) {
		r, err := stagedRecord(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != rs.StagePaused || r.Stage != 0 {
			t.Fatalf("a paused rollout moved: %s stage %d", r.State, r.Stage+1)
		}
		time.Sleep(200 * time.Millisecond) // poll interval, not a wait for state
	}
	if out, code, _ := f.Lbctl(ctx, "rollout", "retry", "--proxy-cluster", "BFE1"); code != 2 || !strings.Contains(out, "PAUSED") {
		t.Fatalf("retry of a paused rollout: exit %d (want 2)\n%s", code, out)
	}
	if out, code, err := f.Lbctl(ctx, "rollout", "resume", "--proxy-cluster", "BFE1"); err != nil || code != 0 {
		t.Fatalf("rollout resume: exit %d, %v\n%s", code, err, out)
	}
	waitStaged(t, f, 10*time.Second, "resumed", func(r rs.Staged) bool {
		return r.State == rs.StageBaking && r.BakeStarted.After(paused.UpdatedAt)
	})
	if out, code, err := f.Lbctl(ctx, "rollout", "abort", "--proxy-cluster", "BFE1"); err != nil || code != 0 {
		t.Fatalf("rollout abort: exit %d, %v\n%s", code, err, out)
	}
	rec = waitStaged(t, f, 10*time.Second, "aborted", func(r rs.Staged) bool { return r.State == rs.StageAborted })
	if !regexp.MustCompile(`aborted by \S+@\S+`).MatchString(rec.Reason) || rec.RollbackVersion <= rec.CandidateVersion {
		t.Fatalf("aborted record %+v, want the author and a republished stable version", rec)
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != rec.RollbackVersion {
		t.Fatalf("BFE1 runs v%d, want v%d (the stable content again)", v, rec.RollbackVersion)
	}
	s, err := liveSnapshot(ctx, f, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Clusters["demo-main"].Row.Weights; w["SC1"] != 100 {
		t.Fatalf("after the abort the row is %v, want the stable SC1 100", w)
	}
}

// kill -9 of the scheduler mid-rollout: the restarted one continues the
// same rollout from its recorded stage to the end.
func TestRolloutStagedSchedulerKilled(t *testing.T) {
	f := stagedFleet(t)
	rec := startChange(t, f, "SC1=90", "SC2=10")
	f.Schedulers[0].Kill()
	if err := f.RestartScheduler(1); err != nil {
		t.Fatal(err)
	}
	done := waitStaged(t, f, 90*time.Second, "the same rollout ends", func(r rs.Staged) bool { return !r.Active() })
	if done.ID != rec.ID || done.State != rs.StageDone || !done.StartedAt.Equal(rec.StartedAt) || done.Stage != 1 {
		t.Fatalf("after the failover: %+v, want rollout %s DONE after stage 2 (continued, not restarted)", done, rec.ID)
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != rec.CandidateVersion {
		t.Fatalf("BFE1 runs v%d, want the candidate v%d", v, rec.CandidateVersion)
	}
}

// An urgent drain during a rollout skips the stages: it reaches every
// proxy at once and the rollout is recorded as URGENT with the reason.
func TestRolloutStagedUrgentDrain(t *testing.T) {
	f := stagedFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec := startChange(t, f, "SC1=90", "SC2=10")
	if out, code, err := f.Lbctl(ctx, "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "e2e urgent drain"); err != nil || code != 0 {
		t.Fatalf("lbctl drain: exit %d, %v\n%s", code, err, out)
	}
	urgent := waitStaged(t, f, 10*time.Second, "urgent", func(r rs.Staged) bool { return r.State == rs.StageUrgent })
	if !strings.Contains(urgent.Reason, "drain of cluster demo-main sub-cluster SC1") || urgent.CandidateVersion <= rec.CandidateVersion {
		t.Fatalf("urgent record %+v, want the drain named and a version above the candidate v%d", urgent, rec.CandidateVersion)
	}
	// Every proxy runs it well before a stage could have baked.
	v := waitApplied(t, f, "BFE1", stagedBake)
	if v != urgent.CandidateVersion {
		t.Fatalf("BFE1 runs v%d, want the urgent v%d", v, urgent.CandidateVersion)
	}
	if p, err := f.Current(ctx, "BFE1"); err != nil || p.Candidate != nil {
		t.Fatalf("pointer %+v (%v), want no candidate", p, err)
	}
	s, err := liveSnapshot(ctx, f, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	if w := s.Clusters["demo-main"].Row.Weights; w["SC1"] != 0 {
		t.Fatalf("row %v, want SC1 drained", w)
	}
}

// An operator write marked --urgent skips the stages of a staged policy: no
// candidate is ever named, every proxy applies it at once, --wait returns
// with the whole fleet on it, and rollout status shows URGENT with the
// author. The next unmarked write is staged again.
func TestRolloutStagedUrgentWrite(t *testing.T) {
	f := stagedFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code, err := f.Lbctl(ctx, "--author", "e2e-alice", "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=90", "SC2=10",
		"--reason", "e2e urgent write", "--urgent", "--wait", "--wait-timeout", "50s")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set --urgent --wait: exit %d, %v\n%s", code, err, out)
	}
	rec := waitStaged(t, f, 10*time.Second, "urgent", func(r rs.Staged) bool { return r.State == rs.StageUrgent })
	if !strings.Contains(rec.Reason, "lbctl weights set --urgent by e2e-alice") {
		t.Fatalf("urgent record %+v, want the write and its author named", rec)
	}
	// --wait returned: every proxy already runs the urgent version, and
	// none was ever put in a stage for it.
	for _, p := range f.ProxiesOf("BFE1") {
		if !appliedInLog(t, p, rec.CandidateVersion) {
			t.Fatalf("%s has not applied the urgent v%d when --wait returned", p.ID, rec.CandidateVersion)
		}
		if err := appliedInStage(p, rec.CandidateVersion, 0); err == nil {
			t.Fatalf("%s applied the urgent v%d in a stage", p.ID, rec.CandidateVersion)
		}
	}
	if p, err := f.Current(ctx, "BFE1"); err != nil || p.Candidate != nil || p.Version != rec.CandidateVersion {
		t.Fatalf("pointer %+v (%v), want v%d plainly", p, err, rec.CandidateVersion)
	}
	status, code, err := f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE1")
	if err != nil || code != 0 || !strings.Contains(status, "ROLLOUT "+rec.ID) || !strings.Contains(status, "URGENT") || !strings.Contains(status, "by e2e-alice") {
		t.Fatalf("rollout status: exit %d, %v, want URGENT by e2e-alice:\n%s", code, err, status)
	}
	// The mark was the write's: the next change is staged.
	next := startChange(t, f, "SC1=80", "SC2=20")
	if next.CandidateVersion <= rec.CandidateVersion || len(next.Selected) != 1 {
		t.Fatalf("next rollout %+v, want a staged candidate above v%d", next, rec.CandidateVersion)
	}
}

// A candidate the canary rejects (over its proxy-local --max-instances,
// which the scheduler does not know) fails the apply gate at once with that
// proxy's reason; the other proxy never applies it; --wait exits 4 and so
// does rollout status.
func TestRolloutStagedCanaryRejects(t *testing.T) {
	f := stagedFleet(t, "SLUICE_MAX_INSTANCES=20")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := liveSnapshot(ctx, f, "BFE1")
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
	for i := range 21 {
		extra = append(extra, fmt.Sprintf("{addr: 127.0.0.1, port: %d, weight: 1}", 20000+i))
	}
	state := strings.Replace(string(fleet.DemoState), "weights: {SC1: 45, SC2: 45, GSLB_BLACKHOLE: 10}", "weights: {SC1: 100}", 1)
	state = strings.Replace(state, `BFE1: {idc: IDC1, trusted_proxies: ["127.0.0.0/8"]}`, fmt.Sprintf(
		`BFE1: {idc: IDC1, trusted_proxies: ["127.0.0.0/8"], rollout: {stages: [{count: 1, bake: %s}, {percent: 100, bake: %s}], gates: {apply_timeout: 20s, min_requests: 10}}}`,
		stagedBake, stagedBake), 1)
	state = strings.Replace(state, "STATIC1: {idc: IDC1}", "STATIC1: {idc: IDC1, instances: ["+strings.Join(extra, ", ")+"]}", 1)
	path := filepath.Join(t.TempDir(), "state.yaml")
	if err := os.WriteFile(path, []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, err := f.Lbctl(ctx, "apply", "-f", path, "--yes", "--wait", "--wait-timeout", "60s")
	if err != nil || code != 4 || !strings.Contains(out, "rolled back") {
		t.Fatalf("lbctl apply --wait of a candidate the canary rejects: exit %d (want 4), %v\n%s", code, err, out)
	}
	rec := waitStaged(t, f, 10*time.Second, "rolled back", func(r rs.Staged) bool { return r.State == rs.StageRolledBack })
	want := "over this proxy's --max-instances 20"
	if rec.FailedGate != "apply" || len(rec.Selected) != 1 || !strings.Contains(rec.Reason, rec.Selected[0]) || !strings.Contains(rec.Reason, want) {
		t.Fatalf("record %+v, want the apply gate failed with the canary's name and its reason (%q)", rec, want)
	}
	for _, p := range f.ProxiesOf("BFE1") {
		if appliedInLog(t, p, rec.CandidateVersion) {
			t.Fatalf("%s applied the candidate v%d (selected %v)", p.ID, rec.CandidateVersion, rec.Selected)
		}
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != rec.RollbackVersion || v <= s.Meta.Version {
		t.Fatalf("BFE1 runs v%d, want the rollback v%d", v, rec.RollbackVersion)
	}
	out, code, err = f.Lbctl(ctx, "rollout", "status", "--proxy-cluster", "BFE1")
	if err != nil || code != 4 || !strings.Contains(out, "ROLLED_BACK") || !strings.Contains(out, want) {
		t.Fatalf("rollout status: exit %d (want 4), %v\n%s", code, err, out)
	}
	t.Logf("rollout status:\n%s", out)
}

// A canary that dies during its stage (kill -9: it could be crash-looping
// on the candidate) fails the apply gate once the apply timeout is over; the
// stable content comes back to the proxy that is left.
func TestRolloutStagedCanaryLostFailsGate(t *testing.T) {
	f := stagedFleet(t)
	rec := startChange(t, f, "SC1=90", "SC2=10")
	for _, p := range f.ProxiesOf("BFE1") {
		if p.ID == rec.Selected[0] {
			p.Kill()
		}
	}
	done := waitStaged(t, f, 40*time.Second, "rolled back", func(r rs.Staged) bool { return !r.Active() })
	if done.State != rs.StageRolledBack || done.FailedGate != "apply" || !strings.Contains(done.Reason, rec.Selected[0]+" (no report since") {
		t.Fatalf("record %+v, want ROLLED_BACK by the apply gate naming the dead canary %s", done, rec.Selected[0])
	}
	if v := waitApplied(t, f, "BFE1", 30*time.Second); v != done.RollbackVersion {
		t.Fatalf("BFE1 runs v%d, want the rollback v%d", v, done.RollbackVersion)
	}
}
