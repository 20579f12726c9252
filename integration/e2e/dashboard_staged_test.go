//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rs "github.com/sluicelb/sluice/api/rollout"
)

// Scenario (headless Chromium): the dashboard shows BFE1's staged rollout
// from the same record lbctl rollout status reads — the stage baking on its
// selected canary, then ROLLED_BACK with the failed gate, its figures and
// the reason — while the page stays live.
func TestDashboardShowsStagedRollout(t *testing.T) {
	exe := chromium(t)
	f := stagedFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := browser(t, ctx, exe)
	staged := `p[data-staged="BFE1"]`
	openDashboard(t, bctx, f.SchedAPIs[0]+"/ui/", `h3[data-rollout="BFE1"]`)
	fault(t, f, "SC2", 100)
	stop := trafficLoop(f)
	defer stop()
	rec := startChange(t, f, "SC1=0", "SC2=100")
	waitInPage(t, bctx, `div.staged`, "the canary's stage baking", 30*time.Second, func(s string) bool {
		if !strings.Contains(s, "staged rollout "+rec.ID) || !strings.Contains(s, "stage 1/2") {
			return false
		}
		// The bad change may already be rolled back on a loaded machine:
		// the selected proxies are shown while the rollout is active.
		return strings.Contains(s, "BAKING") && strings.Contains(s, "selected: "+rec.Selected[0]) || strings.Contains(s, "ROLLED_BACK")
	})
	waitInPage(t, bctx, `span[data-staged-state="BFE1"]`, "ROLLED_BACK", 30*time.Second, func(s string) bool { return s == "ROLLED_BACK" })
	done := waitStaged(t, f, 10*time.Second, "rolled back", func(r rs.Staged) bool { return r.State == rs.StageRolledBack })
	reason := mustText(t, bctx, `p[data-staged-reason="BFE1"]`)
	if reason != "reason: "+done.Reason || !strings.Contains(reason, "gate 5xx") {
		t.Fatalf("the page's reason %q, want the record's %q", reason, done.Reason)
	}
	gate := mustText(t, bctx, `tr[data-gate="BFE1/5xx"]`)
	if !strings.Contains(gate, "FAILED") || !strings.Contains(gate, "%") {
		t.Fatalf("the 5xx gate row %q, want FAILED with its figures", gate)
	}
	if head := mustText(t, bctx, staged); !strings.Contains(head, fmt.Sprintf("candidate v%d", done.CandidateVersion)) {
		t.Fatalf("rollout line %q, want candidate v%d", head, done.CandidateVersion)
	}
}
