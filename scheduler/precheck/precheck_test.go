package precheck

import (
	"testing"

	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/scheduler/plan"
)

// The refusal's words, which lbctl prints and the dashboard answers: every
// broken rule per proxy cluster, and the override only when every one is a
// pinned row dropping all its traffic.
func TestRefusalWords(t *testing.T) {
	drop := validate.Error{Path: "clusters.demo-main.row.weights.GSLB_BLACKHOLE", Msg: "100 drops all traffic; set allow_full_drop to allow it"}
	other := validate.Error{Path: "clusters.demo-main.row", Msg: "something else"}
	for _, c := range []struct {
		name string
		r    Refusal
		want string
	}{
		{"full drop", Refusal{What: WhatDrain(true, "demo-main", "SC2"), Rejections: []plan.Rejection{
			{ProxyCluster: "BFE1", Errs: validate.Errors{drop}, FullDrops: []string{"demo-main"}},
		}}, "refused: the scheduler could not publish the drain of demo-main/SC2; nothing was written:\n" +
			"  proxy cluster BFE1, cluster demo-main: its pinned row would send every request to GSLB_BLACKHOLE (nothing left to serve it)\n" +
			"  proxy cluster BFE1: clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it\n" +
			"To drop all that traffic on purpose, run again with --allow-full-drop."},
		{"another rule", Refusal{What: WhatPin("BFE2", "demo-main"), Rejections: []plan.Rejection{
			{ProxyCluster: "BFE1", Errs: validate.Errors{drop}, FullDrops: []string{"demo-main"}},
			{ProxyCluster: "BFE2", Errs: validate.Errors{other}},
		}}, "refused: the scheduler could not publish the pin of BFE2's row of demo-main; nothing was written:\n" +
			"  proxy cluster BFE1, cluster demo-main: its pinned row would send every request to GSLB_BLACKHOLE (nothing left to serve it)\n" +
			"  proxy cluster BFE1: clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it\n" +
			"  proxy cluster BFE2: clusters.demo-main.row: something else\n" +
			"No flag overrides this: change the write."},
	} {
		if got := c.r.Error(); got != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
	for got, want := range map[string]string{
		WhatDrain(false, "c", "SC1"): "the undrain of c/SC1",
		WhatShift("shift-1"):         "shift shift-1",
		WhatCommand("weights unpin"): "the result of lbctl weights unpin",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}
