package lbproxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/poll"
)

// stateFile writes a desired state (one proxy cluster BFE1, host a.test to
// a backend answering "from-file") and returns its path and the document
// for another weight of the backend.
func stateFile(t *testing.T) (string, func(weight int) string) {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "from-file") }))
	t.Cleanup(backend.Close)
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	state := func(weight int) string {
		return fmt.Sprintf(`topology: {idcs: [IDC1], proxy_clusters: {BFE1: {idc: IDC1}}}
products: {p: {hosts: [a.test], rules: [{cond: "default_t()", cluster: c}]}}
clusters:
  c:
    subclusters:
      S1: {idc: IDC1, instances: [{addr: 127.0.0.1, port: %d, weight: %d}]}
`, port, weight)
	}
	path := filepath.Join(t.TempDir(), "state.yaml")
	if err := os.WriteFile(path, []byte(state(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, state
}

// Issue 17.7: file mode reports what etcd mode reports — applied_at, a
// rejected reload (rejected_version, rejected_reason) in /v1/status, and
// the sluice_proxy_snapshot_* metrics.
func TestFileModeReportsLikeEtcd(t *testing.T) {
	path, state := stateFile(t)
	r := start(t, Config{ConfigFile: path})
	st := adminStatus(t, r)
	if st.AppliedVersion == 0 || st.AppliedAt.IsZero() || st.Source != "file" || st.RejectedVersion != 0 {
		t.Fatalf("status after the first load: %+v, want a version, applied_at, source file, nothing rejected", st)
	}
	metrics := func() string { _, m, _ := httpGet(t, "http://"+r.addrs.Admin+"/metrics", ""); return m }
	for _, want := range []string{
		`sluice_proxy_snapshot_applies_total{result="applied"} 1`,
		fmt.Sprintf("sluice_proxy_snapshot_version %d", st.AppliedVersion),
		"sluice_proxy_snapshot_staleness_seconds 0",
		"sluice_proxy_snapshot_apply_duration_seconds_count 1",
	} {
		if m := metrics(); !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	v1 := st.AppliedVersion
	os.WriteFile(path, []byte("topology: {idcs: [IDC1]\n"), 0o644) // broken YAML
	poll.EventuallyTrue(t, 20*time.Second, "the broken file shown in /v1/status", func() bool {
		st = adminStatus(t, r)
		return st.RejectedVersion != 0
	})
	if st.RejectedVersion != v1+1 || st.RejectedReason == "" || st.AppliedVersion != v1 {
		t.Fatalf("status after a broken file: %+v, want rejected_version %d with a reason, applied %d kept", st, v1+1, v1)
	}
	if m := metrics(); !strings.Contains(m, `sluice_proxy_snapshot_applies_total{result="rejected"} 1`) {
		t.Errorf("metrics lack the rejected reload")
	}
	os.WriteFile(path, []byte(state(3)), 0o644)
	poll.EventuallyTrue(t, 20*time.Second, "the repaired file applied", func() bool {
		st = adminStatus(t, r)
		return st.AppliedVersion != v1
	})
	if st.RejectedVersion != 0 || st.RejectedReason != "" {
		t.Fatalf("status after a newer good file: %+v, want the rejection cleared", st)
	}
}
