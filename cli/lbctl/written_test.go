package lbctl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
)

// Every write of the desired state prints the documented first line (what
// was written and the revision: docs/lbctl.md "Revisions and --wait"), and
// without --wait then says that it is not live yet and which command waits
// for it: the proxies still run the version from before the write, so no
// line may say the change is live or converged.
func TestDesiredStateWritesSayNotLiveYet(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	// The fleet runs v1, converged, computed before any of these writes.
	h.publish(demoSnapshot("BFE1", 1, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 1, EtcdConnected: true, UpdatedAt: time.Now().UTC()})
	modified := filepath.Join(t.TempDir(), "mod.yaml")
	if err := os.WriteFile(modified, []byte(strings.Replace(mustRead(t, "testdata/demo.yaml"), "instance_grace: 5s", "instance_grace: 7s", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	all := func(rev int64) string {
		return fmt.Sprintf("Written to the desired state only: not live until the scheduler publishes it and the proxies apply it. Wait for that with: lbctl rollout status --revision %d --wait\n", rev)
	}
	bfe1 := func(rev int64) string {
		return fmt.Sprintf("Written to the desired state only: not live until the scheduler publishes it and the proxies of BFE1 apply it. Wait for that with: lbctl rollout status --proxy-cluster BFE1 --revision %d --wait\n", rev)
	}
	for _, c := range []struct {
		args []string
		want func(rev int64) string
	}{
		{[]string{"drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "maintenance"},
			func(rev int64) string {
				return fmt.Sprintf("Drained demo-main/SC1 (desired state revision %d).\n", rev) + all(rev)
			}},
		{[]string{"undrain", "--cluster", "demo-main", "--subcluster", "SC1"},
			func(rev int64) string {
				return fmt.Sprintf("Undrained demo-main/SC1 (desired state revision %d).\n", rev) + all(rev)
			}},
		{[]string{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC2=70", "SC1=30"},
			func(rev int64) string {
				return fmt.Sprintf("Pinned BFE1 row of demo-main to SC1=30 SC2=70 (desired state revision %d).\n", rev) + bfe1(rev)
			}},
		{[]string{"weights", "unpin", "--cluster", "demo-main", "--proxy-cluster", "BFE1"},
			func(rev int64) string {
				return fmt.Sprintf("Unpinned BFE1 row of demo-main (desired state revision %d).\n", rev) + bfe1(rev)
			}},
		{[]string{"rollback", "--proxy-cluster", "BFE1", "--to", "1", "--yes"},
			func(rev int64) string {
				return fmt.Sprintf("Pinned BFE1 to v1's rows (desired state revision %d), to be published as a new version.\n", rev) + bfe1(rev)
			}},
		{[]string{"apply", "-f", modified, "--yes"},
			func(rev int64) string {
				return fmt.Sprintf("Applied: desired state is now at revision %d.\n", rev) + all(rev)
			}},
	} {
		out := h.mustRun(c.args...)
		_, rev := h.desired()
		want := c.want(rev)
		if !strings.HasSuffix(out, want) {
			t.Errorf("lbctl %s: stdout\n%s\nwant it to end with\n%s", strings.Join(c.args, " "), out, want)
		}
		if c.args[0] != "apply" && c.args[0] != "rollback" && out != want {
			t.Errorf("lbctl %s: stdout\n%s\nwant exactly\n%s", strings.Join(c.args, " "), out, want)
		}
		for _, claim := range []string{"converged", "is live", "are live", "now live", "applied it"} {
			if strings.Contains(out, claim) {
				t.Errorf("lbctl %s says %q before any proxy applied it:\n%s", strings.Join(c.args, " "), claim, out)
			}
		}
	}
}

// A shift's hint waits for the shift's own revision: rollout status
// without --revision would judge the version converged before the shift.
func TestShiftCreatedSaysNotLiveYet(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	out := h.mustRun("shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2", "--percent", "20", "--ramp", "1m")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "Shift ") {
		t.Fatalf("shift: stdout\n%s", out)
	}
	var rev int64
	if _, err := fmt.Sscanf(lines[0][strings.LastIndex(lines[0], "(revision "):], "(revision %d).", &rev); err != nil {
		t.Fatalf("no revision in %q: %v", lines[0], err)
	}
	want := fmt.Sprintf("Not live until the scheduler runs it and the proxies of BFE1 apply it. Follow it with: lbctl shift list; "+
		"lbctl rollout status --proxy-cluster BFE1 --revision %d --wait waits until the first snapshot computed with it is live (with the ramp, its first step).", rev)
	if lines[1] != want {
		t.Fatalf("shift: second line\n%s\nwant\n%s", lines[1], want)
	}
}
