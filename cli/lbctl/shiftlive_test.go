package lbctl

import (
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/rollout"
)

// `lbctl shift --wait` counts the proxies that run the shift's version:
// a proxy gone before the rollout is a row of the converged report (GONE,
// not counted), not a proxy the shift is live on.
func TestShiftLiveLineCountsSynced(t *testing.T) {
	sh := config.Shift{ID: "shift-1", ProxyCluster: "BFE1"}
	rep := rolloutReport{Converged: true, Proxies: []proxyRollout{
		{ProxyCluster: "BFE1", ID: "p1", State: rollout.Synced, Applied: 7, Target: 7},
		{ProxyCluster: "BFE1", ID: "p2", State: rollout.Synced, Applied: 7, Target: 7},
		{ProxyCluster: "BFE1", ID: "p4", State: rollout.Gone, Applied: 5, Target: 7, NotCounted: true},
	}}
	if got, want := shiftLiveLine(sh, rep, 7), "Shift shift-1 is live on 2 proxies of BFE1 (v7); 1 gone before it, not counted."; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	rep.Proxies = rep.Proxies[:2]
	if got, want := shiftLiveLine(sh, rep, 7), "Shift shift-1 is live on 2 proxies of BFE1 (v7)."; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}
