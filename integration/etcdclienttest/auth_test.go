package etcdclienttest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// authServer starts etcd with auth on: root, and user sluice with
// readwrite on /sluice/ only.
func authServer(t *testing.T, o etcdtest.Options) *etcdtest.Server {
	s, _ := etcdtest.NewWithAuth(t, o, "sluice", "pw", "/sluice/")
	return s
}

func newClient(t *testing.T, cfg etcdclient.Config) *etcdclient.Client {
	t.Helper()
	c, err := etcdclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventually polls f every 50ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	return poll.Every(t, d, 50*time.Millisecond, what, f)
}

func put(c *etcdclient.Client, key, val string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.Put(ctx, key, val)
	return c.Explain(err, key)
}

// watchLoop watches prefix like the components do: a cancelled or closed
// watch is opened again. It sends every value it sees.
func watchLoop(ctx context.Context, c *etcdclient.Client, prefix string, out chan<- string) {
	for ctx.Err() == nil {
		for wr := range c.Watch(ctx, prefix, clientv3.WithPrefix()) {
			for _, ev := range wr.Events {
				select {
				case out <- string(ev.Kv.Value):
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestRecoversAfterFullRestart(t *testing.T) {
	for _, withAuth := range []bool{true, false} {
		name := map[bool]string{true: "auth", false: "no-auth"}[withAuth]
		t.Run(name, func(t *testing.T) {
			var s *etcdtest.Server
			cfg := etcdclient.Config{}
			if withAuth {
				s = authServer(t, etcdtest.Options{})
				cfg.Username, cfg.Password = "sluice", "pw"
			} else {
				var err error
				if s, err = etcdtest.Start(etcdtest.Options{Dir: t.TempDir()}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Stop)
			}
			cfg.Endpoints = s.Endpoints
			c := newClient(t, cfg)
			if err := put(c, "/sluice/k", "before"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			seen := make(chan string, 16)
			done := make(chan struct{})
			go func() { defer close(done); watchLoop(ctx, c, "/sluice/w", seen) }()
			defer func() { cancel(); <-done }()

			s.Stop()
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			back := time.Now()
			took := eventually(t, 10*time.Second, "put after restart", func() error { return put(c, "/sluice/k", "after") })
			t.Logf("FIGURE %s: a put works again %s after etcd restarted", name, took.Round(time.Millisecond))
			if !c.Connected() {
				t.Errorf("Connected() = false after a successful put; state %+v", c.State())
			}
			// The watch: a value written after the restart arrives.
			deadline := time.After(10*time.Second - time.Since(back))
			for i := 0; ; i++ {
				root, err := s.ClientAs(map[bool]string{true: "root"}[withAuth], map[bool]string{true: etcdtest.RootPassword}[withAuth])
				if err != nil {
					t.Fatal(err)
				}
				pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err = root.Put(pctx, "/sluice/w", "v")
				pcancel()
				root.Close()
				if err != nil {
					t.Fatal(err)
				}
				select {
				case <-seen:
					t.Logf("FIGURE %s: the watch delivers again %s after etcd restarted", name, time.Since(back).Round(time.Millisecond))
					return
				case <-time.After(500 * time.Millisecond):
				case <-deadline:
					t.Fatalf("watch: no event within 10s of the restart; state %+v", c.State())
				}
			}
		})
	}
}

func TestTokenExpiryIsInvisible(t *testing.T) {
	s := authServer(t, etcdtest.Options{AuthTokenTTL: 1})
	c := newClient(t, etcdclient.Config{Endpoints: s.Endpoints, Username: "sluice", Password: "pw"})
	if err := put(c, "/sluice/k", "1"); err != nil {
		t.Fatal(err)
	}
	// Not waiting for a state: the token's 1s TTL has to elapse unused.
	time.Sleep(2500 * time.Millisecond)
	// Many callers at once find the token expired: one authenticates, all
	// succeed.
	errs := make(chan error, 20)
	for i := range 20 {
		go func() { errs <- put(c, fmt.Sprintf("/sluice/k%d", i), "2") }()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatalf("put after the token expired: %v", err)
		}
	}
}

func TestPermissionRevokedAndGranted(t *testing.T) {
	s := authServer(t, etcdtest.Options{})
	c := newClient(t, etcdclient.Config{Endpoints: s.Endpoints, Username: "sluice", Password: "pw"})
	const key = "/sluice/status/BFE1/p1"
	if err := put(c, key, "1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Revoke(ctx, "sluice", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	var err error
	eventually(t, 20*time.Second, "put refused", func() error {
		if err = put(c, key, "2"); err == nil {
			return errors.New("put still allowed")
		}
		return nil
	})
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "http://") + ": permission denied on " + key + " for user sluice"
	if err.Error() != want {
		t.Errorf("error:\n got %q\nwant %q", err, want)
	}
	if cl := etcdclient.ClassOf(err); cl != etcdclient.ClassPermission {
		t.Errorf("class %q, want permission", cl)
	}
	if st := c.State(); !st.Connected || st.LastErrorClass != etcdclient.ClassPermission || st.LastError != want {
		t.Errorf("state %+v: want connected with last error %q", st, want)
	}
	if err := s.Grant(ctx, "sluice", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "put after the grant", func() error { return put(c, key, "3") })
}

func TestWrongPasswordSaysSo(t *testing.T) {
	s := authServer(t, etcdtest.Options{})
	c := newClient(t, etcdclient.Config{Endpoints: s.Endpoints, Username: "sluice", Password: "wrong"})
	err := put(c, "/sluice/k", "1")
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "http://") + ": authentication failed (wrong user or password) for user sluice"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got %v\nwant %q", err, want)
	}
	if c.Connected() {
		t.Error("Connected() with a refused password")
	}
	if st := c.State(); st.LastErrorClass != etcdclient.ClassAuth {
		t.Errorf("state %+v: want last error class auth", st)
	}
	if n := c.Errors()[etcdclient.ClassAuth]; n == 0 {
		t.Error("no auth error counted")
	}
	// No user at all on an auth-enabled etcd.
	anon := newClient(t, etcdclient.Config{Endpoints: s.Endpoints})
	if err := put(anon, "/sluice/k", "1"); etcdclient.ClassOf(err) != etcdclient.ClassAuth || !strings.Contains(err.Error(), "no user was given") {
		t.Errorf("no user: got %v", err)
	}
}

func TestUntrustedCA(t *testing.T) {
	s, otherCA := etcdtest.NewTLS(t)
	start := time.Now()
	c := newClient(t, etcdclient.Config{Endpoints: s.Endpoints, CACert: otherCA})
	err := put(c, "/sluice/k", "1")
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "https://") + ": TLS: x509: certificate signed by unknown authority"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got %v\nwant %q", err, want)
	}
	if time.Since(start) > 3500*time.Millisecond { // the put's own 3s timeout
		t.Errorf("took %s", time.Since(start))
	}
	good := newClient(t, etcdclient.Config{Endpoints: s.Endpoints, CACert: s.CAFile})
	if err := put(good, "/sluice/k", "1"); err != nil {
		t.Fatalf("with the right CA: %v", err)
	}
}

func TestUnreachableSaysRefused(t *testing.T) {
	s, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ep := s.Endpoints[0]
	s.Stop()
	c := newClient(t, etcdclient.Config{Endpoints: []string{ep}, Username: "sluice", Password: "pw"})
	err = put(c, "/sluice/k", "1")
	want := "etcd " + strings.TrimPrefix(ep, "http://") + ": unreachable (connection refused)"
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n got %v\nwant %q", err, want)
	}
}

// A full quota (NOSPACE): writes fail with a clear error, reads still work,
// and writes work again after compaction, defragmentation and disarming the
// alarm.
func TestNoSpaceSaysSoAndRecovers(t *testing.T) {
	s, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir(), QuotaBackendBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	c := newClient(t, etcdclient.Config{Endpoints: s.Endpoints})
	big := strings.Repeat("x", 64<<10)
	var werr error
	for i := 0; i < 200 && werr == nil; i++ {
		werr = put(c, "/sluice/fill", big)
	}
	want := "etcd " + strings.TrimPrefix(s.Endpoints[0], "http://") + ": database space exceeded (the etcd quota is reached: compact and defragment etcd)"
	if werr == nil || werr.Error() != want || etcdclient.ClassOf(werr) != etcdclient.ClassNoSpace {
		t.Fatalf("write on a full quota:\n got %v\nwant %q", werr, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "/sluice/fill"); err != nil {
		t.Fatalf("read on a full quota: %v", err)
	}
	// The operator's remedy.
	r, err := c.Get(ctx, "/sluice/fill")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, r.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Defragment(ctx, s.Endpoints[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "writes work again", func() error { return put(c, "/sluice/k", "v") })
}
