package etcdclienttest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/etcdclient"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// Against Debian's etcd 3.4 (which, before 3.4.28, rejects an Authenticate
// call that carries a stale token): a full restart with auth on, and the
// client works again within 10 s. CI installs the package; there the test
// must run, elsewhere it runs when the binary is there.
func TestDebianEtcdRestartWithAuth(t *testing.T) {
	if _, err := os.Stat(etcdtest.DebianEtcd); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing in CI (.ci/run installs etcd-server): %v", etcdtest.DebianEtcd, err)
		}
		t.Skipf("%s not installed (apt-get install etcd-server)", etcdtest.DebianEtcd)
	}
	e, err := etcdtest.StartExternal(etcdtest.DebianEtcd, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.AddUser(ctx, "sluice", "pw", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, etcdclient.Config{Endpoints: e.Endpoints, Username: "sluice", Password: "pw"})
	if err := put(c, "/sluice/k", "before"); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 10*time.Second, "put after the etcd 3.4 restart", func() error { return put(c, "/sluice/k", "after") })
	t.Logf("FIGURE etcd 3.4 (Debian) with auth: a put works again %s after etcd restarted", took.Round(time.Millisecond))
}
