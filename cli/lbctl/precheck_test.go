package lbctl

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// refused asserts a write exits 1 with the planner's reason and the
// override, and that the desired state was not written.
func (h *harness) refused(want []string, args ...string) {
	h.t.Helper()
	_, rev := h.desired()
	out, errs, code := h.run("", args...)
	if code != ExitError || strings.Contains(out, "Applied") || strings.Contains(out, "desired state revision") {
		h.t.Fatalf("lbctl %v: exit %d, stdout %q, stderr %q; want exit 1 and no write reported", args, code, out, errs)
	}
	for _, w := range append([]string{"refused: the scheduler could not publish", "nothing was written"}, want...) {
		if !strings.Contains(errs, w) {
			h.t.Fatalf("lbctl %v: stderr %q does not say %q", args, errs, w)
		}
	}
	if _, now := h.desired(); now != rev {
		h.t.Fatalf("lbctl %v: refused, yet the desired state moved from revision %d to %d", args, rev, now)
	}
}

// Draining the last sub-cluster a pinned row can use would make the pin
// drop every request: refused before writing, with the flag that allows
// it; with the flag the drain carries allow_full_drop.
func TestDrainOfEverySubclusterRefusedBeforeWriting(t *testing.T) {
	h := newHarness(t)
	h.applyDemo() // BFE1's demo-main row is pinned SC1=45 SC2=45 GSLB_BLACKHOLE=10
	h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC1")
	h.refused([]string{
		"could not publish the drain of demo-main/SC2; nothing was written",
		"proxy cluster BFE1, cluster demo-main: its pinned row would send every request to GSLB_BLACKHOLE",
		"clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic",
		"run again with --allow-full-drop",
	}, "drain", "--cluster", "demo-main", "--subcluster", "SC2")

	out := h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC2", "--allow-full-drop", "--reason", "evacuate")
	if !strings.Contains(out, "Drained demo-main/SC2") {
		t.Fatalf("drain --allow-full-drop printed %q", out)
	}
	s, _ := h.desired()
	if len(s.Drains) != 2 || !s.Drains[1].AllowFullDrop || s.Drains[0].AllowFullDrop {
		t.Fatalf("drains %+v; want SC2's to carry allow_full_drop", s.Drains)
	}
	// Undrain is never refused for a drop it ends.
	h.mustRun("undrain", "--cluster", "demo-main", "--subcluster", "SC2")
}

// A pin on a drained sub-cluster needs somewhere to go: with no instance
// registered in SC2 the pin would be all GSLB_BLACKHOLE (refused); once an
// agent registered one there (read from etcd as the scheduler reads it) the
// same pin moves to SC2 and is accepted.
func TestWeightsSetRefusedUnlessAnInstanceCanTakeIt(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC1")
	set := []string{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=100"}
	h.refused([]string{"could not publish the pin of BFE2's row of demo-main", "proxy cluster BFE2, cluster demo-main", "--allow-full-drop"}, set...)

	addr := netip.MustParseAddrPort("127.0.0.1:9001")
	k, err := h.layout.Instance("demo-main", "SC2", addr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(report.Instance{Cluster: "demo-main", SubCluster: "SC2", IDC: "IDC2", Addr: "127.0.0.1", Port: 9001, Weight: 1, State: "healthy"})
	if _, err := h.cli.Put(context.Background(), k, string(b)); err != nil {
		t.Fatal(err)
	}
	h.mustRun(set...)
	s, _ := h.desired()
	if len(s.Pins) != 2 || s.Pins[1].ProxyCluster != "BFE2" || s.Pins[1].AllowFullDrop {
		t.Fatalf("pins %+v; want BFE2's without allow_full_drop", s.Pins)
	}
}

// apply of a file whose pinned row has nothing left is refused; with
// --allow-full-drop the pin gets allow_full_drop (and says so).
func TestApplyRefusedThenAllowedFullDrop(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	raw, err := os.ReadFile("testdata/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "drained.yaml")
	body := string(raw) + "drains:\n  - {cluster: demo-main, subcluster: SC1}\n  - {cluster: demo-main, subcluster: SC2}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	h.refused([]string{"could not publish the state in " + f + ";", "proxy cluster BFE1, cluster demo-main", "--allow-full-drop"}, "apply", "-f", f, "--yes")
	out, errs, code := h.run("", "apply", "-f", f, "--yes", "--allow-full-drop")
	if code != 0 || !strings.Contains(out, "--allow-full-drop: the pin of BFE1's row of demo-main gets allow_full_drop") {
		t.Fatalf("apply --allow-full-drop: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	s, _ := h.desired()
	if len(s.Pins) != 1 || !s.Pins[0].AllowFullDrop || len(s.Drains) != 2 {
		t.Fatalf("stored pins %+v drains %+v", s.Pins, s.Drains)
	}
}

// allowPins allows every pinned full drop or none: with a rejection of
// another kind among them it changes no pin and has nothing to say (the
// write is refused, so no line may say a pin got allow_full_drop).
func TestAllowPinsAllOrNothing(t *testing.T) {
	pins := func() *config.State {
		return &config.State{Pins: []config.Pin{{ProxyCluster: "BFE1", Cluster: "c"}, {ProxyCluster: "BFE2", Cluster: "c"}}}
	}
	drop := func(pc string) plan.Rejection {
		return plan.Rejection{ProxyCluster: pc, FullDrops: []string{"c"},
			Errs: validate.Errors{{Path: "clusters.c.row.weights.GSLB_BLACKHOLE", Msg: "100 drops all traffic"}}}
	}
	other := plan.Rejection{ProxyCluster: "BFE2", Errs: validate.Errors{{Path: "clusters.c.row", Msg: "something else"}}}

	st := pins()
	notes, ok := allowPins(st, []plan.Rejection{drop("BFE1"), other})
	if ok || len(notes) != 0 || st.Pins[0].AllowFullDrop || st.Pins[1].AllowFullDrop {
		t.Fatalf("with another rejection: ok %v, notes %q, pins %+v; want false, none, unchanged", ok, notes, st.Pins)
	}
	st = pins()
	notes, ok = allowPins(st, []plan.Rejection{drop("BFE1"), drop("BFE2")})
	want := []string{
		"--allow-full-drop: the pin of BFE1's row of c gets allow_full_drop: it drops all its traffic",
		"--allow-full-drop: the pin of BFE2's row of c gets allow_full_drop: it drops all its traffic",
	}
	if !ok || strings.Join(notes, "\n") != strings.Join(want, "\n") || !st.Pins[0].AllowFullDrop || !st.Pins[1].AllowFullDrop {
		t.Fatalf("full drops only: ok %v, notes %q, pins %+v", ok, notes, st.Pins)
	}
}

// A refusal of a command without --allow-full-drop (history rollback) does
// not tell the user to run it again with that flag: rolling BFE2 back to
// v1's row (SC1=100) once SC1 is drained pins a row with nowhere to go (no
// instance is registered in SC2), as weights set SC1=100 would: the pin
// would drop all of BFE2's traffic, and nothing overrides that but another
// write.
func TestRollbackRefusalNamesNoFlagItLacks(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	h.publish(demoSnapshot("BFE2", 1, map[string]int{"SC1": 100}, false))
	h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC1")
	args := []string{"rollback", "--proxy-cluster", "BFE2", "--to", "1", "--yes"}
	h.refused([]string{
		"proxy cluster BFE2, cluster demo-main: its pinned row would send every request to GSLB_BLACKHOLE",
		"\n" + noFlagOverride + "\n",
	}, args...)
	if _, errs, _ := h.run("", args...); strings.Contains(errs, "--allow-full-drop") {
		t.Fatalf("rollback's refusal names a flag rollback does not have: %q", errs)
	}
}
