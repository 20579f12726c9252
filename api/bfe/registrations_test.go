package bfe

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
)

// Issue 17, defect 8: a cluster whose instances only agents register was
// exported as an empty cluster_table.data without a word. Now the export
// warns naming the cluster (and each empty sub-cluster of a filled one), and
// with the registrations merged in it writes them, and re-importing gives
// the registered instances back.
func TestExportWarnsAndWritesRegistrations(t *testing.T) {
	st, _, err := ImportDir(sampleConf(t), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := sortedKeys(st.Clusters)
	if len(names) < 2 {
		t.Fatalf("sample conf has %d clusters, the test needs 2", len(names))
	}
	// First cluster: all instances come from agents. Second: one sub-cluster emptied.
	agentOnly, partial := names[0], names[1]
	var regs []report.Instance
	c := st.Clusters[agentOnly]
	for _, sn := range sortedKeys(c.SubClusters) {
		sc := c.SubClusters[sn]
		for _, in := range sc.Instances {
			regs = append(regs, report.Instance{Cluster: agentOnly, SubCluster: sn, Addr: in.Addr, Port: in.Port, Weight: in.Weight, Labels: in.Labels})
		}
		sc.Instances = nil
		c.SubClusters[sn] = sc
	}
	st.Clusters[agentOnly] = c
	p := st.Clusters[partial]
	const emptied = "aaa.spare"
	p.SubClusters[emptied] = config.SubCluster{IDC: p.SubClusters[sortedKeys(p.SubClusters)[0]].IDC}

	out := t.TempDir()
	warns, err := ExportDir(st, DefaultProxyCluster, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"cluster " + agentOnly + ": left out of " + ClusterTableFile + ": none of its",
		"cluster " + partial + ": sub-cluster " + emptied + " left out of " + ClusterTableFile + ": it lists no instance"}
	if len(warns) != len(want) {
		t.Fatalf("warnings %q, want %d starting %q", warns, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(warns[i], want[i]) {
			t.Errorf("warning %d = %q, want it to start %q", i, warns[i], want[i])
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, ClusterTableFile))
	if strings.Contains(string(b), `"`+agentOnly+`"`) {
		t.Fatalf("%s lists %s, which has no instance:\n%s", ClusterTableFile, agentOnly, b)
	}

	stray := report.Instance{Cluster: "nope", SubCluster: "x", Addr: "10.9.9.9", Port: 80, Weight: 1}
	full, rwarns := WithRegistrations(st, append(regs, stray))
	if len(rwarns) != 1 || !strings.Contains(rwarns[0], "10.9.9.9:80: cluster nope is not in the desired state") {
		t.Fatalf("registration warnings %q", rwarns)
	}
	if len(st.Clusters[agentOnly].SubClusters[sortedKeys(c.SubClusters)[0]].Instances) != 0 {
		t.Fatal("WithRegistrations changed its input")
	}
	out2 := t.TempDir()
	warns, err = ExportDir(full, DefaultProxyCluster, out2)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		if strings.HasPrefix(w, "cluster "+agentOnly+":") {
			t.Fatalf("with the registrations %s still warns: %q", agentOnly, w)
		}
	}
	back, _, err := ImportDir(out2, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for sn, sc := range full.Clusters[agentOnly].SubClusters {
		if got := back.Clusters[agentOnly].SubClusters[sn].Instances; !reflect.DeepEqual(got, sc.Instances) {
			t.Errorf("%s/%s re-imported %+v, want the registered %+v", agentOnly, sn, got, sc.Instances)
		}
	}
}

// A registration replaces the static instance at its address (IPv4-mapped
// IPv6 equal to IPv4), as in the scheduler's inventory.
func TestMergeInstanceReplacesSameAddress(t *testing.T) {
	list := []config.Instance{{Addr: "10.0.0.1", Port: 80, Weight: 1}, {Addr: "10.0.0.2", Port: 80, Weight: 1}}
	got := config.MergeInstance(list, config.Instance{Addr: "::ffff:10.0.0.2", Port: 80, Weight: 7})
	got = config.MergeInstance(got, config.Instance{Addr: "10.0.0.2", Port: 81, Weight: 3})
	want := []config.Instance{{Addr: "10.0.0.1", Port: 80, Weight: 1}, {Addr: "::ffff:10.0.0.2", Port: 80, Weight: 7}, {Addr: "10.0.0.2", Port: 81, Weight: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
