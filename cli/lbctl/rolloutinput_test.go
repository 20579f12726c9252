package lbctl

import (
	"fmt"
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

// A rollout policy whose stage writes count: 0 next to percent: 50, or
// whose p99_factor is below 1, is refused by lbctl apply and lbctl
// validate with the field as written (and its line in the file), the value
// and the rule, and nothing is written (the old validator read the stage
// as percent: 50 and accepted p99_factor: 0.5).
func TestApplyRolloutExplicitZeroRefused(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	demo, err := os.ReadFile("testdata/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The rollout is appended to the demo: its stage on line n+3, its
	// gates on line n+4.
	n := strings.Count(string(demo), "\n")
	stage, gates := fmt.Sprint(n+3), fmt.Sprint(n+4)
	for _, c := range []struct {
		rollout string
		want    []string // line: error
	}{
		{"rollout:\n  stages:\n    - {count: 0, percent: 50}\n", []string{
			stage + ": rollout.stages[0]: sets count and percent; set exactly one of count, percent and proxy_clusters",
			stage + ": rollout.stages[0].count: 0 selects no proxy, and a stage must select at least one; want a number of proxies ≥ 1",
		}},
		{"rollout:\n  stages:\n    - {percent: 0}\n", []string{
			stage + ": rollout.stages[0].percent: 0 selects no proxy, and a stage must select at least one; want 0 < p ≤ 100 (a percent of each proxy cluster's proxies)",
		}},
		{"rollout:\n  stages:\n    - {count: 1}\n  gates: {p99_factor: 0.5}\n", []string{
			gates + ": rollout.gates.p99_factor: 0.5 would demand a canary faster than the stable proxies, failing a fair one by noise; want a factor ≥ 1 (absent: 3), or a negative value to turn the p99 gate off",
		}},
	} {
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(bad, []byte(string(demo)+c.rollout), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"apply", "-f", bad, "--yes"}, {"validate", "-f", bad}} {
			out, errs, code := h.run("", args...)
			var got []string
			for _, l := range strings.Split(errs, "\n") {
				if rest, ok := strings.CutPrefix(l, bad+":"); ok {
					got = append(got, rest)
				}
			}
			if code != ExitError || !strings.Contains(errs, bad+" is not a valid desired state:") || strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("lbctl %v with\n%s: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d and exactly (after %s:):\n%s", args, c.rollout, code, out, errs, ExitError, bad, strings.Join(c.want, "\n"))
			}
		}
		if _, now := h.desired(); now != rev {
			t.Fatalf("a refused apply wrote the desired state: revision %d → %d", rev, now)
		}
	}
}
