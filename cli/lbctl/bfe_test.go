package lbctl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

// bfeSample is the repository's own BFE conf directory (testdata/bfe/conf at
// the repository root; see testdata/bfe/README.md).
const bfeSample = "../../testdata/bfe/conf"

func TestBFEImportSampleAndApply(t *testing.T) {
	h := newHarness(t)
	out := filepath.Join(t.TempDir(), "state.yaml")
	stdout, stderr, code := h.run("", "bfe", "import", "--conf-dir", bfeSample, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "warning: ") || !strings.Contains(stdout, "Next: lbctl apply -f "+out) {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var s config.State
	if err := codec.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if err := validate.State(&s); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Clusters["web_plain"]; !ok || len(s.Pins) == 0 || s.Pins[0].ProxyCluster != "BFE" {
		t.Fatalf("imported state: clusters %v pins %+v", len(s.Clusters), s.Pins)
	}
	h.mustRun("apply", "-f", out, "--yes")
	exp := t.TempDir()
	h.mustRun("bfe", "export", "--proxy-cluster", "BFE", "--out", exp)
	for _, f := range []string{"server_data_conf/route_rule.data", "server_data_conf/host_rule.data", "server_data_conf/cluster_conf.data", "cluster_conf/gslb.data", "cluster_conf/cluster_table.data"} {
		if _, err := os.Stat(filepath.Join(exp, f)); err != nil {
			t.Errorf("export did not write %s", f)
		}
	}
}

func TestBFEImportRejectsBrokenDir(t *testing.T) {
	h := newHarness(t)
	_, stderr, code := h.run("", "bfe", "import", "--conf-dir", t.TempDir())
	if code != ExitError || !strings.Contains(stderr, "bfe import") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}
