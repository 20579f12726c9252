package dashboard

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// An action the scheduler could not publish is refused before it is
// written, as lbctl refuses it and in lbctl's words (scheduler/precheck):
// 400, and the desired state's revision does not move; the override it
// names is the page's own (the pin form's box), not lbctl's flag. The
// pin's allow_full_drop, which the page sends, writes it.
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
		// The last sub-cluster BFE1's pinned row can use: the page has no
		// override for a drain (lbctl's flag is not the page's).
		{`{"kind":"drain","cluster":"c","subcluster":"SC1","reason":"maintenance"}`,
			"refused: the scheduler could not publish the drain of c/SC1; nothing was written:\n" + fmt.Sprintf(drop, "BFE1", "BFE1") +
				"The page does not override this: to drop all that traffic on purpose, make the same change with lbctl and --allow-full-drop."},
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
}
