package lbproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/faultproxy"
	"github.com/sluicelb/sluice/testkit/poll"
)

// authEtcd starts etcd with auth on and user sluice (password "pw") allowed
// on the test prefix only; it returns the server and a root client.
func authEtcd(t *testing.T) (*etcdtest.Server, *clientv3.Client) {
	return etcdtest.NewWithAuth(t, etcdtest.Options{}, "sluice", "pw", prefix+"/")
}

func metricsText(t *testing.T, r *running) string {
	_, body, _ := httpGet(t, "http://"+r.addrs.Admin+"/metrics", "")
	return body
}

// A wrong password at boot: the proxy starts anyway, from its disk cache
// when it has one, and says why etcd is not used.
func TestWrongPasswordAtBoot(t *testing.T) {
	s, root := authEtcd(t)
	b1 := backendServer(t, "b1", nil)
	wantErr := "etcd " + strings.TrimPrefix(s.Endpoints[0], "http://") + ": authentication failed (wrong user or password) for user sluice"

	t.Run("no cache", func(t *testing.T) {
		r := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, Username: "sluice", Password: "wrong"}, CacheDir: t.TempDir()})
		poll.EventuallyTrue(t, 10*time.Second, "the auth failure in the status", func() bool {
			st := adminStatus(t, r)
			return st.Etcd != nil && st.Etcd.LastErrorClass == etcdclient.ClassAuth
		})
		st := adminStatus(t, r)
		if st.Etcd.Connected || st.Etcd.LastError != wantErr || st.AppliedVersion != 0 {
			t.Errorf("status %+v / etcd %+v: want not connected, last error %q, nothing applied", st, *st.Etcd, wantErr)
		}
		if code, _, _ := httpGet(t, "http://"+r.addrs.Admin+"/readyz", ""); code != 503 {
			t.Errorf("readyz %d, want 503 with nothing to serve", code)
		}
		m := metricsText(t, r)
		if !strings.Contains(m, "sluice_etcd_connected 0") || strings.Contains(m, `sluice_etcd_errors_total{class="auth"} 0`) {
			t.Errorf("metrics: want sluice_etcd_connected 0 and auth errors counted:\n%s", grepLines(m, "sluice_etcd_"))
		}
	})

	t.Run("cache", func(t *testing.T) {
		dir := t.TempDir()
		r := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, Username: "sluice", Password: "pw"}, CacheDir: dir})
		publish(t, root, snapFor(4, b1.URL, map[string]int{"SC1": 100}))
		poll.EventuallyTrue(t, 10*time.Second, "v4 applied", func() bool { return adminStatus(t, r).AppliedVersion == 4 })
		r.shutdown(t)

		r2 := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, Username: "sluice", Password: "wrong"}, CacheDir: dir, ID: "p2"})
		poll.EventuallyTrue(t, 10*time.Second, "cache applied", func() bool { return adminStatus(t, r2).AppliedVersion == 4 })
		if code, body, _ := httpGet(t, "http://"+r2.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b1" {
			t.Fatalf("served %d %q, want 200 from b1 out of the disk cache", code, body)
		}
		poll.EventuallyTrue(t, 10*time.Second, "the auth failure in the status", func() bool {
			st := adminStatus(t, r2)
			return st.Etcd != nil && st.Etcd.LastError == wantErr && !st.Etcd.Connected
		})
		if st := adminStatus(t, r2); st.Source != "disk-cache" {
			t.Errorf("source %q, want disk-cache", st.Source)
		}
	})
}

// A full etcd restart, with auth on and off: the proxy applies what is
// published afterwards and reports its status again, by itself, within 10 s.
func TestFullEtcdRestart(t *testing.T) {
	for _, withAuth := range []bool{true, false} {
		name := map[bool]string{true: "auth", false: "no auth"}[withAuth]
		t.Run(name, func(t *testing.T) {
			var s *etcdtest.Server
			var root *clientv3.Client
			e := Etcd{}
			if withAuth {
				s, root = authEtcd(t)
				e.Username, e.Password = "sluice", "pw"
			} else {
				s, root = etcdtest.New(t)
			}
			e.Endpoints = s.Endpoints
			b1 := backendServer(t, "b1", nil)
			b2 := backendServer(t, "b2", nil)
			r := start(t, Config{Etcd: e, CacheDir: t.TempDir()})
			publish(t, root, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
			poll.EventuallyTrue(t, 10*time.Second, "v1 applied", func() bool { return adminStatus(t, r).AppliedVersion == 1 })

			s.Stop()
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			root2, err := s.ClientAs(map[bool]string{true: "root"}[withAuth], map[bool]string{true: etcdtest.RootPassword}[withAuth])
			if err != nil {
				t.Fatal(err)
			}
			defer root2.Close()
			publish(t, root2, snapFor(2, b2.URL, map[string]int{"SC1": 100}))
			poll.EventuallyTrue(t, 10*time.Second, "v2 applied after the restart", func() bool { return adminStatus(t, r).AppliedVersion == 2 })
			applied := time.Since(back)
			sk, _ := layout.Status("BFE1", "p1")
			poll.EventuallyTrue(t, 10*time.Second-applied, "status key at v2", func() bool {
				res, err := root2.Get(context.Background(), sk)
				return err == nil && len(res.Kvs) == 1 && strings.Contains(string(res.Kvs[0].Value), `"applied_version":2`)
			})
			t.Logf("FIGURE lbproxy (%s): applies a new snapshot %s and reports status %s after etcd restarted",
				name, applied.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
			if st := adminStatus(t, r); st.Etcd == nil || !st.Etcd.Connected {
				t.Errorf("etcd state %+v: want connected", st.Etcd)
			}
		})
	}
}

// Shutdown with etcd gone ends within the shutdown timeout.
func TestShutdownWithEtcdAway(t *testing.T) {
	s, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	r := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, Username: "sluice", Password: "pw"}, CacheDir: t.TempDir(),
		ShutdownTimeout: 2 * time.Second})
	poll.EventuallyTrue(t, 10*time.Second, "etcd failure seen", func() bool {
		st := adminStatus(t, r)
		return st.Etcd != nil && st.Etcd.LastErrorClass == etcdclient.ClassUnreachable
	})
	t0 := time.Now()
	r.shutdown(t)
	took := time.Since(t0)
	t.Logf("FIGURE lbproxy: shutdown with etcd away took %s", took.Round(time.Millisecond))
	if took > 2*time.Second+revokeBudget {
		t.Errorf("shutdown took %s, want within the 2s shutdown timeout (+%s to give up the lease)", took, revokeBudget)
	}
}

// revokeBudget is what the status reporter may spend revoking its lease.
const revokeBudget = 2 * time.Second

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Permission revoked while running: the proxy keeps serving its last good
// snapshot, says which key it may not use, and recovers by itself once the
// permission is granted again.
func TestPermissionRevokedWhileRunning(t *testing.T) {
	s, root := authEtcd(t)
	b1 := backendServer(t, "b1", nil)
	b2 := backendServer(t, "b2", nil)
	r := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, Username: "sluice", Password: "pw"}, CacheDir: t.TempDir()})
	publish(t, root, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v1 applied", func() bool { return adminStatus(t, r).AppliedVersion == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Revoke(ctx, "sluice", prefix+"/"); err != nil {
		t.Fatal(err)
	}
	sk, _ := layout.Status("BFE1", "p1")
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "http://") + ": permission denied on " + sk + " for user sluice"
	poll.EventuallyTrue(t, 10*time.Second, "the refused status write in the status", func() bool {
		st := adminStatus(t, r)
		return st.Etcd != nil && st.Etcd.LastError == want
	})
	publish(t, root, snapFor(2, b2.URL, map[string]int{"SC1": 100}))
	// For 2s (the open watch may still report v2's pointer; reading its
	// snapshot is refused) the proxy keeps v1 and serves it.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test"); code != 200 || body != "b1" {
			t.Fatalf("while refused: %d %q, want 200 from b1 (last good)", code, body)
		}
		if st := adminStatus(t, r); st.AppliedVersion != 1 {
			t.Fatalf("applied v%d while the snapshot keys are refused, want v1 kept", st.AppliedVersion)
		}
	}
	if err := s.Grant(ctx, "sluice", prefix+"/"); err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	poll.EventuallyTrue(t, 10*time.Second, "v2 applied once granted again", func() bool { return adminStatus(t, r).AppliedVersion == 2 })
	t.Logf("FIGURE lbproxy: applies v2 %s after the permission was granted again", time.Since(granted).Round(time.Millisecond))
}

// A connection whose peer stops answering (a silent network partition) is
// noticed by the keepalive within ~KeepAliveTime+KeepAliveTimeout.
func TestDeadEtcdConnectionDetected(t *testing.T) {
	srv, _ := etcdtest.New(t)
	fp, err := faultproxy.New(strings.TrimPrefix(srv.Endpoints[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	c, err := etcdclient.New(etcdclient.Config{Endpoints: []string{fp.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wch := c.Watch(ctx, "/k") // a stream: keepalive pings only with one open
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	<-wch
	if !c.Connected() {
		t.Fatal("not connected after a put")
	}
	fp.Pause()
	defer fp.Resume()
	t0 := time.Now()
	limit := etcdclient.KeepAliveTime + etcdclient.KeepAliveTimeout + 2*time.Second
	poll.EventuallyTrue(t, limit, "the dead connection noticed", func() bool { return !c.Connected() })
	t.Logf("FIGURE keepalive: a silent etcd connection noticed after %s", time.Since(t0).Round(100*time.Millisecond))
}

// An etcd whose certificate the proxy does not trust: the proxy starts,
// and its status says so.
func TestUntrustedEtcdCertificateAtBoot(t *testing.T) {
	s, otherCA := etcdtest.NewTLS(t)
	r := start(t, Config{Etcd: Etcd{Endpoints: s.Endpoints, CACert: otherCA}, CacheDir: t.TempDir()})
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "https://") + ": TLS: x509: certificate signed by unknown authority"
	poll.EventuallyTrue(t, 10*time.Second, "the TLS failure in the status", func() bool {
		st := adminStatus(t, r)
		return st.Etcd != nil && st.Etcd.LastError == want && !st.Etcd.Connected
	})
	if code, _, _ := httpGet(t, "http://"+r.addrs.Admin+"/readyz", ""); code != 503 {
		t.Errorf("readyz %d, want 503 with nothing to serve", code)
	}
}
