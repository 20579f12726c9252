package lbagent

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// authEtcd starts etcd with auth on and user sluice ("pw") allowed on
// /sluice/ only; it returns the server and a root client.
func authEtcd(t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	return etcdtest.NewWithAuth(t, etcdtest.Options{}, "sluice", "pw", "/sluice/")
}

// readyz answers 0 while the agent's admin server is not listening yet
// (callers poll).
func readyz(t *testing.T, a *Agent) (int, string) {
	t.Helper()
	addr := a.AdminAddr()
	if addr == "" {
		return 0, ""
	}
	code, body := httpGet(t, "http://"+addr+"/readyz")
	var doc struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal([]byte(body), &doc)
	return code, doc.Reason
}

// After an etcd outage (auth on, a full restart), the agent registers again
// within 10 s of etcd being back, and /readyz said why meanwhile.
func TestReRegistersAfterOutageWithAuth(t *testing.T) {
	srv, root := authEtcd(t)
	b := newBackend(t)
	cfg := baseConfig(t, srv, b)
	cfg.EtcdUsername, cfg.EtcdPassword = "sluice", "pw"
	r := startAgent(t, cfg)
	key := r.a.Key()
	var first clientv3.LeaseID
	poll.EventuallyTrue(t, 10*time.Second, "registered", func() bool {
		_, l, ok := getInstance(t, root, key)
		first = l
		code, _ := readyz(t, r.a)
		return ok && code == 200
	})
	srv.Stop()
	poll.EventuallyTrue(t, 20*time.Second, "lease loss noticed", func() bool { return r.a.reg.Load().Lease() == 0 })
	want := "not registered: waiting for etcd: etcd " + strings.TrimPrefix(srv.Endpoints[0], "http://") + ": unreachable (connection refused)"
	poll.EventuallyTrue(t, 10*time.Second, "readyz says why", func() bool {
		code, reason := readyz(t, r.a)
		return code == 503 && reason == want
	})
	// The outage lasts: long enough for every reconnect backoff to reach its
	// cap (SLUICE_TEST_OUTAGE=5m measures the five minutes).
	outage := 8 * time.Second
	if v := os.Getenv("SLUICE_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SLUICE_TEST_OUTAGE=%q: %v", v, err)
		}
		outage = d
	}
	time.Sleep(outage)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	root2, err := srv.ClientAs("root", etcdtest.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root2.Close()
	poll.EventuallyTrue(t, 10*time.Second, "re-registered under a new lease", func() bool {
		_, l, ok := getInstance(t, root2, key)
		return ok && l != first && l != 0
	})
	t.Logf("FIGURE lbagent with auth: re-registered %s after etcd came back (outage %s + lease loss)", time.Since(back).Round(time.Millisecond), outage)
	poll.EventuallyTrue(t, 10*time.Second, "ready again", func() bool { code, _ := readyz(t, r.a); return code == 200 })
}

// A wrong password or etcd away at boot: the agent runs, says why, and
// stops at once when told to.
func TestStartsWithoutEtcdAndStopsPromptly(t *testing.T) {
	srv, _ := authEtcd(t)
	down, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	down.Stop()
	b := newBackend(t)
	for _, tc := range []struct {
		name, password string
		srv            *etcdtest.Server
		want           string
	}{
		{"wrong password", "wrong", srv, "authentication failed (wrong user or password) for user sluice"},
		{"etcd down", "pw", down, "unreachable (connection refused)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t, tc.srv, b)
			cfg.EtcdUsername, cfg.EtcdPassword = "sluice", tc.password
			r := startAgent(t, cfg)
			poll.EventuallyTrue(t, 10*time.Second, "admin up", func() bool { return r.a.AdminAddr() != "" })
			want := "not registered: waiting for etcd: etcd " + strings.TrimPrefix(tc.srv.Endpoints[0], "http://") + ": " + tc.want
			poll.EventuallyTrue(t, 10*time.Second, "readyz says why", func() bool {
				code, reason := readyz(t, r.a)
				return code == 503 && reason == want
			})
			t0 := time.Now()
			if err := r.stop(t); err != nil {
				t.Fatalf("Run: %v", err)
			}
			took := time.Since(t0)
			t.Logf("FIGURE lbagent (%s): stop took %s", tc.name, took.Round(time.Millisecond))
			if took > 3*time.Second {
				t.Errorf("stop took %s", took)
			}
		})
	}
}
