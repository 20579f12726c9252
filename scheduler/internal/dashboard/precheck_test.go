package dashboard

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// An action the scheduler could not publish is refused before it is
// written, as lbctl refuses it and in lbctl's words (scheduler/precheck):
// 400, and the desired state's revision does not move; the override it
// names is the page's own (the pin's or the drain's box), not lbctl's
// flag. The box (allow_full_drop) writes it, the pin's or the drain's, as
// lbctl's --allow-full-drop does. Another action with allow_full_drop is
// refused, not written without it.
func TestActionsThePlanRejectsAreRefusedAsLbctl(t *testing.T) {
	_, cli := etcdtest.New(t)
	st := state()
	st.Scheduler = config.DefaultSchedulerSettings()
	st.Topology.ProxyClusters["BFE2"] = config.ProxyCluster{IDC: "IDC2"}
	c := st.Clusters["c"]
	c.Policy = config.DefaultPolicy()
	sc1 := c.SubClusters["SC1"]
	sc1.Instances = nil // SC1 serves nothing it is not pinned to; SC2 is drained
	c.SubClusters["SC1"] = sc1
	st.Clusters["c"] = c
	st.Pins[0].Weights = map[string]int{"SC1": 100}
	act := actionServer(t, cli, st)

	const drop = "  proxy cluster %s, cluster c: its pinned row would send every request to GSLB_BLACKHOLE (nothing left to serve it)\n" +
		"  proxy cluster %s: clusters.c.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it\n"
	for _, c := range []struct{ body, want string }{
		// The last sub-cluster BFE1's pinned row can use: the override is
		// the drain dialog's box.
		{`{"kind":"drain","cluster":"c","subcluster":"SC1","reason":"maintenance"}`,
			"refused: the scheduler could not publish the drain of c/SC1; nothing was written:\n" + fmt.Sprintf(drop, "BFE1", "BFE1") +
				`To drop all that traffic on purpose, tick "allow a full drop" and send the drain again.`},
		{`{"kind":"undrain","cluster":"c","subcluster":"SC2","allow_full_drop":true}`,
			`action kind "undrain": allow_full_drop is for a pin or a drain only`},
		// A pin on drained SC2, with nothing available to take it: the
		// override is the form's box.
		{`{"kind":"pin","cluster":"c","proxy_cluster":"BFE2","weights":{"SC2":100}}`,
			"refused: the scheduler could not publish the pin of BFE2's row of c; nothing was written:\n" + fmt.Sprintf(drop, "BFE2", "BFE2") +
				`To drop all that traffic on purpose, tick "allow GSLB_BLACKHOLE=100" and send the pin again.`},
	} {
		rev := etcdtest.ModRevision(t, cli, layout.Desired())
		code, out := act(c.body)
		if want := map[string]string{"error": c.want}; code != http.StatusBadRequest || fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("%s: %d %q\nwant 400 %q", c.body, code, out, want)
		}
		if now := etcdtest.ModRevision(t, cli, layout.Desired()); now != rev {
			t.Errorf("%s: refused, yet the desired state moved from revision %d to %d", c.body, rev, now)
		}
	}

	// With allow_full_drop the pin drops all BFE2's traffic on purpose.
	code, out := act(`{"kind":"pin","cluster":"c","proxy_cluster":"BFE2","weights":{"SC2":100},"allow_full_drop":true}`)
	if code != http.StatusOK || out["revision"] != fmt.Sprint(etcdtest.ModRevision(t, cli, layout.Desired())) {
		t.Fatalf("pin with allow_full_drop: %d %q", code, out)
	}
	// The drain with its box: stored with allow_full_drop, which lets
	// BFE1's pinned row drop all its traffic (lbctl drain
	// --allow-full-drop).
	code, out = act(`{"kind":"drain","cluster":"c","subcluster":"SC1","reason":"maintenance","allow_full_drop":true}`)
	rev := etcdtest.ModRevision(t, cli, layout.Desired())
	if want := fmt.Sprintf("Drained c/SC1 (desired state revision %d). ", rev); code != http.StatusOK || !strings.HasPrefix(out["message"], want) || out["revision"] != fmt.Sprint(rev) {
		t.Fatalf("drain with allow_full_drop: %d %q, want 200 and a message starting %q", code, out, want)
	}
	got := stored(t, cli)
	i := slices.IndexFunc(got.Drains, func(d config.Drain) bool { return d.SubCluster == "SC1" })
	if i < 0 || !got.Drains[i].AllowFullDrop || got.Drains[i].Reason != "maintenance" {
		t.Fatalf("stored drains %+v: want SC1's with allow_full_drop and its reason", got.Drains)
	}
}
