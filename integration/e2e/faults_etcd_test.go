//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/integration/fleet"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// authFleet is the smallest fleet over an etcd with password auth: two
// static demo backends (sub-clusters SC1, SC2 of cluster main), one
// lbscheduler (user sched) and one lbproxy (user proxy), each user with
// readwrite on /sluice/ only. The fleet package's etcd takes no auth, token
// TTL or quota options, hence this one.
type authFleet struct {
	etcd         *etcdtest.Server
	root         *clientv3.Client
	url, admin   string
	proxy, sched *binProc
	ports        [2]int
}

func startAuthFleet(t *testing.T, o etcdtest.Options) *authFleet {
	t.Helper()
	s, root := etcdtest.NewWithAuth(t, o, "sched", "pw-sched", "/sluice/")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.AddUser(ctx, "proxy", "pw-proxy", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	af := &authFleet{etcd: s, root: root}
	for i, sc := range []string{"SC1", "SC2"} {
		af.ports[i] = fleet.FreePort()
		addr := fmt.Sprintf("127.0.0.1:%d", af.ports[i])
		startBin(t, dir, "backend-"+sc, "demo-backend", "--listen", addr, "--cluster", "main", "--subcluster", sc)
		if err := fleet.WaitHTTP(ctx, "http://"+addr+"/healthz", 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	af.setRow(t, 50)
	ep := strings.Join(s.Endpoints, ",")
	af.sched = startBin(t, dir, "scheduler", "lbscheduler", "--id", "sched-1", "--etcd", ep, "--etcd-user", "sched", "--etcd-password", "pw-sched",
		"--api", fmt.Sprintf("127.0.0.1:%d", fleet.FreePort()), "--session-ttl", "3s")
	listen, admin := fmt.Sprintf("127.0.0.1:%d", fleet.FreePort()), fmt.Sprintf("127.0.0.1:%d", fleet.FreePort())
	af.url, af.admin = "http://"+listen, "http://"+admin
	af.proxy = startBin(t, dir, "proxy", "lbproxy", "--proxy-cluster", "BFE1", "--id", "p1", "--etcd", ep, "--etcd-user", "proxy", "--etcd-password", "pw-proxy",
		"--listen", listen, "--admin", admin, "--cache-dir", filepath.Join(dir, "cache"), "--access-log", "off")
	if err := fleet.WaitHTTP(ctx, af.admin+"/readyz", 60*time.Second); err != nil {
		t.Fatalf("proxy not ready: %v\n%s", err, af.logTail(af.proxy.log))
	}
	af.waitRow(t, 50, 30*time.Second)
	return af
}

// setRow writes the desired state with BFE1's row for main pinned to
// SC1=sc1, SC2=100-sc1 (as root: the operator).
func (af *authFleet) setRow(t *testing.T, sc1 int) {
	t.Helper()
	inst := func(p int) []map[string]any {
		return []map[string]any{{"addr": "127.0.0.1", "port": p, "weight": 10}}
	}
	state := map[string]any{
		"topology": map[string]any{"idcs": []string{"IDC1"}, "proxy_clusters": map[string]any{"BFE1": map[string]any{"idc": "IDC1"}}},
		"products": map[string]any{"demo": map[string]any{"hosts": []string{"demo.local"},
			"rules": []map[string]any{{"name": "default", "cond": "default_t()", "cluster": "main"}}}},
		"default_product": "demo",
		"clusters": map[string]any{"main": map[string]any{"subclusters": map[string]any{
			"SC1": map[string]any{"idc": "IDC1", "instances": inst(af.ports[0])},
			"SC2": map[string]any{"idc": "IDC1", "instances": inst(af.ports[1])},
		}}},
		"pins": []map[string]any{{"proxy_cluster": "BFE1", "cluster": "main", "weights": map[string]int{"SC1": sc1, "SC2": 100 - sc1}, "reason": "fault test"}},
	}
	b, _ := json.Marshal(state)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := af.root.Put(ctx, "/sluice/desired", string(b)); err != nil {
		t.Fatal(err)
	}
}

type proxyStatusView struct {
	AppliedVersion  uint64 `json:"applied_version"`
	RejectedVersion uint64 `json:"rejected_version"`
}

// waitRow waits until the proxy serves a snapshot whose main row has
// SC1 = sc1 and returns the applied version.
func (af *authFleet) waitRow(t *testing.T, sc1 int, timeout time.Duration) uint64 {
	t.Helper()
	var st proxyStatusView
	eventually(t, timeout, fmt.Sprintf("the proxy applies SC1=%d", sc1), func() error {
		var view struct {
			Clusters map[string]struct {
				Row map[string]int `json:"row"`
			} `json:"clusters"`
		}
		if err := getJSON(af.admin+"/v1/table", &view); err != nil {
			return err
		}
		if w := view.Clusters["main"].Row; w["SC1"] != sc1 {
			return fmt.Errorf("row %v", w)
		}
		return getJSON(af.admin+"/v1/status", &st)
	})
	return st.AppliedVersion
}

func (af *authFleet) logTail(path string) string {
	b, _ := os.ReadFile(path)
	return tail(b, 3000)
}

// logSays waits until the log at path has a line containing every one of words.
func logSays(t *testing.T, path string, timeout time.Duration, words ...string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%s says %q", filepath.Base(path), words), func() error {
		b, _ := os.ReadFile(path)
	lines:
		for _, l := range strings.Split(string(b), "\n") {
			for _, w := range words {
				if !strings.Contains(l, w) {
					continue lines
				}
			}
			return nil
		}
		return fmt.Errorf("no such line")
	})
}

// Catalogue A14: the etcd auth token expires (TTL 2 s) while the scheduler
// and the proxy hold it. Both authenticate again without a word: the next
// change is published and applied (time measured from the change), no
// request fails, the proxy never refuses or loses its configuration.
func TestFaultsEtcdAuthTokenExpiry(t *testing.T) {
	af := startAuthFleet(t, etcdtest.Options{AuthTokenTTL: 2})
	v := af.waitRow(t, 50, 30*time.Second)
	l := startLoad([]string{af.url}, 31)
	defer l.end()
	l.waitSent(t, 100)
	// Not waiting for a state: the tokens' 2 s TTL has to elapse unused.
	time.Sleep(3500 * time.Millisecond)
	changed := time.Now()
	af.setRow(t, 30)
	nv := af.waitRow(t, 30, 30*time.Second)
	took := time.Since(changed)
	failed, sent, _, failures := l.end()
	var st proxyStatusView
	if err := getJSON(af.admin+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("A14 tokens expired (TTL 2 s, 3.5 s idle): v%d → v%d published and applied %.1f s after the change; %d of %d requests failed; rejected version %d",
		v, nv, took.Seconds(), failed, sent, st.RejectedVersion)
	if failed != 0 {
		t.Errorf("A14: %d of %d requests failed: %v", failed, sent, failures)
	}
	if st.RejectedVersion != 0 {
		t.Errorf("A14: the proxy refused v%d", st.RejectedVersion)
	}
	if took > 10*time.Second {
		t.Errorf("A14: the change took %s to apply after the tokens expired", took)
	}
}

// Catalogue A16: the proxy's permission on /sluice/ is revoked, then a new
// version is published. The proxy cannot read it, says "permission denied",
// and keeps serving its last good (0 failed requests, applied version
// unchanged); once granted again it applies the new version (time measured
// from the grant).
func TestFaultsEtcdPermissionRevoked(t *testing.T) {
	af := startAuthFleet(t, etcdtest.Options{})
	v := af.waitRow(t, 50, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := startLoad([]string{af.url}, 32)
	defer l.end()
	if err := af.etcd.Revoke(ctx, "proxy", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	// etcd checks a watch's permission only when it is made: the proxy's
	// store check (every 3 s) finds the read refused and makes the watch
	// again, which etcd refuses — until then an open watch would still
	// deliver the next version.
	logSays(t, af.proxy.log, 30*time.Second, "watch resync", "permission denied")
	af.setRow(t, 20)
	eventually(t, 30*time.Second, "the scheduler published the new row", func() error {
		r, err := af.root.Get(ctx, "/sluice/current/BFE1")
		if err != nil || len(r.Kvs) == 0 {
			return fmt.Errorf("pointer: %v", err)
		}
		var p struct {
			Version uint64 `json:"version"`
		}
		if err := json.Unmarshal(r.Kvs[0].Value, &p); err != nil {
			return err
		}
		if p.Version <= v {
			return fmt.Errorf("pointer at v%d", p.Version)
		}
		return nil
	})
	// Two more refused attempts after the publish: the proxy tried to read it.
	denied := func() int {
		b, _ := os.ReadFile(af.proxy.log)
		return strings.Count(string(b), "permission denied")
	}
	n := denied()
	eventually(t, 30*time.Second, "the proxy tried again after the publish", func() error {
		if d := denied(); d < n+2 {
			return fmt.Errorf("%d refused reads since the publish", d-n)
		}
		return nil
	})
	var st proxyStatusView
	if err := getJSON(af.admin+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.AppliedVersion != v {
		t.Fatalf("A16: the proxy applied v%d without read permission (had v%d)", st.AppliedVersion, v)
	}
	l.waitSent(t, 200)
	if err := af.etcd.Grant(ctx, "proxy", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	nv := af.waitRow(t, 20, 60*time.Second)
	took := time.Since(granted)
	failed, sent, _, failures := l.end()
	t.Logf("A16 read permission revoked: the proxy said permission denied, kept v%d; granted again, it applied v%d %.1f s later; %d of %d requests failed",
		v, nv, took.Seconds(), failed, sent)
	if failed != 0 {
		t.Errorf("A16: %d of %d requests failed: %v", failed, sent, failures)
	}
}

// Catalogue A11: etcd's backend quota (1 MiB) is filled (NOSPACE alarm)
// while the scheduler, paused, has a change to publish. Resumed, it cannot
// write and says "database space exceeded"; the proxy keeps serving (0
// failed requests, version unchanged). After the operator's remedy (delete,
// compact, defragment, disarm) the change is published and applied (time
// measured from the disarm).
func TestFaultsEtcdNoSpace(t *testing.T) {
	af := startAuthFleet(t, etcdtest.Options{QuotaBackendBytes: 1 << 20})
	v := af.waitRow(t, 50, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := startLoad([]string{af.url}, 33)
	defer l.end()
	if err := af.sched.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	af.setRow(t, 25)
	big := strings.Repeat("x", 64<<10)
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		_, werr = af.root.Put(ctx, "/fill", big)
	}
	if werr == nil || !strings.Contains(werr.Error(), "database space exceeded") {
		t.Fatalf("filling the quota: %v", werr)
	}
	if err := af.sched.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	logSays(t, af.sched.log, 30*time.Second, "database space exceeded")
	var st proxyStatusView
	if err := getJSON(af.admin+"/v1/status", &st); err != nil {
		t.Fatal(err)
	}
	if st.AppliedVersion != v {
		t.Fatalf("A11: applied v%d with the quota full, want v%d", st.AppliedVersion, v)
	}
	l.waitSent(t, 200)
	// The remedy.
	r, err := af.root.Delete(ctx, "/fill")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := af.root.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := af.root.Defragment(ctx, af.etcd.Endpoints[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := af.root.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	disarmed := time.Now()
	nv := af.waitRow(t, 25, 60*time.Second)
	took := time.Since(disarmed)
	failed, sent, _, failures := l.end()
	b, _ := os.ReadFile(af.sched.log)
	t.Logf("A11 NOSPACE: the scheduler said database space exceeded (%d log lines), the proxy kept v%d; after the remedy the change was applied as v%d %.1f s after the disarm; %d of %d requests failed",
		strings.Count(string(b), "database space exceeded"), v, nv, took.Seconds(), failed, sent)
	if failed != 0 {
		t.Errorf("A11: %d of %d requests failed: %v", failed, sent, failures)
	}
}
