package lbctl

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/bfe"
	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
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

// Issue 17, defect 8: bfe export wrote an empty cluster_table.data entry
// for clusters whose instances agents register, without a word. Now it
// warns naming the cluster, and --live writes the registrations.
func TestBFEExportWarnsAndLiveWritesRegistrations(t *testing.T) {
	h := newHarness(t)
	st, _, err := bfe.ImportDir(bfeSample, bfe.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := st.Clusters["assist"]
	var regs []report.Instance
	for sn, sc := range c.SubClusters {
		for _, in := range sc.Instances {
			regs = append(regs, report.Instance{Cluster: "assist", SubCluster: sn, IDC: sc.IDC, Addr: in.Addr, Port: in.Port + 1000, Weight: 3, State: config.StateHealthy})
		}
		sc.Instances = nil
		c.SubClusters[sn] = sc
	}
	st.Clusters["assist"] = c
	if len(regs) == 0 {
		t.Fatal("sample cluster assist has no instance to move to a registration")
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	h.mustRun("apply", "-f", file, "--yes")

	table := func(dir string) string {
		b, err := os.ReadFile(filepath.Join(dir, bfe.ClusterTableFile))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	exp := t.TempDir()
	_, stderr, code := h.run("", "bfe", "export", "--proxy-cluster", "BFE", "--out", exp)
	if code != 0 || !strings.Contains(stderr, "warning: cluster assist: left out of "+bfe.ClusterTableFile) || !strings.Contains(stderr, "--live") {
		t.Fatalf("export without --live: exit %d, stderr %q", code, stderr)
	}
	if strings.Contains(table(exp), `"assist"`) || !strings.Contains(table(exp), `"web_plain"`) {
		t.Fatalf("cluster_table.data:\n%s", table(exp))
	}

	for _, r := range regs {
		k, _ := h.layout.Instance(r.Cluster, r.SubCluster, netip.AddrPortFrom(netip.MustParseAddr(r.Addr), uint16(r.Port)))
		v, _ := json.Marshal(r)
		if _, err := h.cli.Put(t.Context(), k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	live := t.TempDir()
	_, stderr, code = h.run("", "bfe", "export", "--proxy-cluster", "BFE", "--out", live, "--live")
	if code != 0 || strings.Contains(stderr, "cluster assist") {
		t.Fatalf("export --live: exit %d, stderr %q", code, stderr)
	}
	back, _, err := bfe.ImportDir(live, bfe.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, sc := range back.Clusters["assist"].SubClusters {
		for _, in := range sc.Instances {
			if in.Weight != 3 {
				t.Errorf("re-imported %+v, want the registered weight 3", in)
			}
			n++
		}
	}
	if n != len(regs) {
		t.Fatalf("re-imported %d assist instances, want the %d registered", n, len(regs))
	}
}
