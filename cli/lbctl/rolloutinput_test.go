package lbctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rollout stage with percent 101 is refused by lbctl apply with exactly
// one error, naming the stage, the value and the rule, and nothing is
// written; lbctl validate says the same.
func TestApplyBadRolloutStageOneError(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	demo, err := os.ReadFile("testdata/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	doc := string(demo) + "rollout:\n  stages:\n    - percent: 10\n    - percent: 101\n    - percent: 100\n"
	if err := os.WriteFile(bad, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = "rollout.stages[1].percent: 101 is outside 0 < p ≤ 100 (a percent of each proxy cluster's proxies)"
	for _, args := range [][]string{{"apply", "-f", bad, "--yes"}, {"validate", "-f", bad}} {
		out, errs, code := h.run("", args...)
		if code != ExitError || strings.Count(errs, "rollout.stages[") != 1 || !strings.Contains(errs, want) || strings.Contains(errs, "below an earlier stage") {
			t.Errorf("lbctl %v: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d and the one error %q", args, code, out, errs, ExitError, want)
		}
	}
	if _, now := h.desired(); now != rev {
		t.Fatalf("a refused apply wrote the desired state: revision %d → %d", rev, now)
	}
}
