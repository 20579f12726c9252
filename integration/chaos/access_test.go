//go:build chaos

package chaos

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicelb/sluice/api/etcdclient"
)

// TestAccess checks the compose fleet's etcd security: TLS with client
// certificates, and each role limited to its keys (deploy/compose/access.conf).
func TestAccess(t *testing.T) {
	env := newEnv(t)
	certs := filepath.Join(env.Out, "certs-public")
	mustDocker(t, "cp", "sluice-bfe1-p1:/certs", certs)
	as := func(user string) *clientv3.Client {
		t.Helper()
		tc, err := userTLS(certs, user)
		if err != nil {
			t.Fatal(err)
		}
		c, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	l := env.Layout
	statusOther, _ := l.Status("BFE1", "bfe1-p2")
	statusOwn, _ := l.Status("BFE1", "bfe1-p1")
	curBFE1, _ := l.Current("BFE1")
	curBFE2, _ := l.Current("BFE2")
	snap, _ := l.Snapshot("BFE1", 999999)
	otherInst, _ := l.Instance("demo-main", "SC1", netip.MustParseAddrPort("10.91.0.12:8080"))
	ownInst, _ := l.Instance("demo-main", "SC1", netip.MustParseAddrPort("10.91.0.11:8080"))
	type op struct {
		user, what string
		do         func(ctx context.Context, c *clientv3.Client) error
		allowed    bool
	}
	get := func(k string) func(context.Context, *clientv3.Client) error {
		return func(ctx context.Context, c *clientv3.Client) error { _, err := c.Get(ctx, k); return err }
	}
	// Writes that would be allowed use a key nobody reads and are deleted.
	ops := []op{
		{"bfe1-p1", "read current/BFE1", get(curBFE1), true},
		{"bfe1-p1", "read current/BFE2", get(curBFE2), false},
		{"bfe1-p1", "read desired", get(l.Desired()), false},
		{"bfe1-p1", "write another proxy's status", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, statusOther, "{}")
			return err
		}, false},
		{"bfe1-p1", "read its own status", get(statusOwn), true},
		{"bfe1-p1", "write desired", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, l.Desired(), "{}")
			return err
		}, false},
		{"agent-sc1-1", "write another instance", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, otherInst, "{}")
			return err
		}, false},
		{"agent-sc1-1", "read its own instance", get(ownInst), true},
		{"agent-sc1-1", "read desired", get(l.Desired()), false},
		{"operator", "read desired", get(l.Desired()), true},
		{"operator", "write a snapshot", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, snap, "{}")
			return err
		}, false},
		{"scheduler1", "write desired", func(ctx context.Context, c *clientv3.Client) error {
			_, err := c.Put(ctx, l.Desired(), "{}")
			return err
		}, false},
		{"scheduler1", "read desired", get(l.Desired()), true},
	}
	clients := map[string]*clientv3.Client{}
	denied, forbidden := 0, 0
	for _, o := range ops {
		if !o.allowed {
			forbidden++
		}
		c := clients[o.user]
		if c == nil {
			c = as(o.user)
			clients[o.user] = c
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := o.do(ctx, c)
		cancel()
		switch {
		case o.allowed && err != nil:
			t.Errorf("%s: %s: want allowed, got %v", o.user, o.what, err)
		case !o.allowed && !errors.Is(err, rpctypes.ErrPermissionDenied):
			t.Errorf("%s: %s: want permission denied, got %v", o.user, o.what, err)
		case !o.allowed:
			denied++
		}
	}
	// Without a client certificate the TLS handshake is refused.
	tc, err := userTLS(certs, "")
	if err != nil {
		t.Fatal(err)
	}
	anon, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints[:1], TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = anon.Get(ctx, l.Desired())
		cancel()
		anon.Close()
	}
	if err == nil {
		t.Error("a client without a certificate read the desired state")
	}
	msg := fmt.Sprint(err)
	if len(msg) > 90 {
		msg = msg[:90] + "..."
	}
	fmt.Printf("    %-28s %d of %d forbidden operations denied, %d allowed ones passed; without a certificate: %s\n",
		"access:", denied, forbidden, len(ops)-forbidden, msg)

	// A client that does not trust the fleet's CA is refused by its own
	// TLS check, and the one client constructor says so (#16 "say why").
	tc, err = userTLS(certs, "operator")
	if err != nil {
		t.Fatal(err)
	}
	tc.RootCAs = x509.NewCertPool()
	untrusted, err := etcdclient.New(etcdclient.Config{Endpoints: etcdEndpoints[:1], TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = untrusted.Get(ctx, l.Desired())
	cancel()
	err = untrusted.Explain(err, l.Desired())
	untrusted.Close()
	want := "etcd 127.0.0.1:12379: TLS: x509: certificate signed by unknown authority"
	if err == nil || etcdclient.ClassOf(err) != etcdclient.ClassTLS || err.Error() != want {
		t.Errorf("a client without the fleet's CA: got %v (class %q), want %q", err, etcdclient.ClassOf(err), want)
	}
	fmt.Printf("    %-28s a client not trusting the fleet's CA: %v\n", "access:", err)
}
