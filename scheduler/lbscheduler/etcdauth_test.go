package lbscheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// authEtcd starts etcd with auth on and user sluice ("pw") allowed on
// /sluice/ only.
func authEtcd(t *testing.T) *etcdtest.Server {
	s, _ := etcdtest.NewWithAuth(t, etcdtest.Options{}, "sluice", "pw", "/sluice/")
	return s
}

// startOwn starts a scheduler that builds its own client (as the binary).
func startOwn(t *testing.T, endpoints []string, user, password string) *Scheduler {
	t.Helper()
	s, err := Start(context.Background(), Config{
		ID: "S1", Endpoints: endpoints, Username: user, Password: password,
		APIAddr: "127.0.0.1:0", SessionTTL: 2 * time.Second, Debounce: 10 * time.Millisecond, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatalf("Start must not fail because of etcd: %v", err)
	}
	return s
}

// stopWithin stops s and fails when that takes longer than d.
func stopWithin(t *testing.T, s *Scheduler, d time.Duration) time.Duration {
	t.Helper()
	t0 := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.Stop() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Stop: %v", err)
		}
	case <-time.After(d):
		t.Fatalf("Stop did not return within %s", d)
	}
	return time.Since(t0)
}

// With etcd away or refusing the password, the scheduler starts, says why
// it is not ready, and stops at once when told to.
func TestStartsWithoutEtcdAndStopsPromptly(t *testing.T) {
	down, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	down.Stop()
	auth := authEtcd(t)
	for _, tc := range []struct {
		name, user, password string
		eps                  []string
		want                 string
	}{
		{"etcd down", "sluice", "pw", down.Endpoints, "unreachable (connection refused)"},
		{"etcd down, no auth", "", "", down.Endpoints, ""},
		{"wrong password", "sluice", "wrong", auth.Endpoints, "authentication failed (wrong user or password) for user sluice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startOwn(t, tc.eps, tc.user, tc.password)
			want := "inventory not synced: waiting for etcd: etcd " + strings.TrimPrefix(tc.eps[0], "http://") + ": " + tc.want
			poll.EventuallyTrue(t, 20*time.Second, "readyz says why", func() bool {
				code, body := get(t, s, "/readyz")
				if tc.want == "" { // no call has failed yet: every one waits for etcd
					return code == 503 && strings.HasPrefix(body, "inventory not synced: waiting for etcd")
				}
				return code == 503 && strings.TrimSpace(body) == want
			})
			took := stopWithin(t, s, 3*time.Second)
			t.Logf("FIGURE lbscheduler (%s): stop took %s", tc.name, took.Round(time.Millisecond))
		})
	}
}

// A full etcd restart with auth: the leader publishes the next change by
// itself within 10 s.
func TestRecoversAfterEtcdRestartWithAuth(t *testing.T) {
	srv := authEtcd(t)
	root, err := srv.ClientAs("root", etcdtest.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	put(t, root, layout.Desired(), desired(0, "30s"))
	root.Close()
	s := startOwn(t, srv.Endpoints, "sluice", "pw")
	defer stopWithin(t, s, 10*time.Second)
	poll.EventuallyTrue(t, 20*time.Second, "leader with v1", func() bool {
		code, _ := get(t, s, "/readyz")
		return s.IsLeader() && code == 200 && s.Publisher() != nil
	})
	srv.Stop()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	root, err = srv.ClientAs("root", etcdtest.RootPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	put(t, root, layout.Desired(), desired(1, "30s"))
	poll.EventuallyTrue(t, time.Until(back.Add(10*time.Second)), "a snapshot with the new instance within 10s of the etcd restart", func() bool {
		l := live(t, root, "BFE1")
		return l != nil && instances(l, "SC2")["10.9.9.1:80"]
	})
	t.Logf("FIGURE lbscheduler with auth: publishes again %s after etcd restarted", time.Since(back).Round(time.Millisecond))
}
