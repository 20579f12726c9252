package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/backoff"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const key = "/sluice/test/presence"

// putHold writes key under each lease it is given and waits for the end of
// the session; it reports each lease it wrote under on wrote.
func putHold(cli *clientv3.Client, wrote chan<- clientv3.LeaseID) Hold {
	return func(ctx context.Context, id clientv3.LeaseID) error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.Put(pctx, key, fmt.Sprint(int64(id)), clientv3.WithLease(id))
		cancel()
		if err != nil {
			return err
		}
		wrote <- id
		<-ctx.Done()
		return nil
	}
}

// keyLease is the lease key is bound to now (0: no key).
func keyLease(cli *clientv3.Client) (clientv3.LeaseID, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, nil
	}
	return clientv3.LeaseID(r.Kvs[0].Lease), nil
}

func start(t *testing.T, cfg Config, hold Hold) (*Keeper, func()) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	k, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx, hold) }()
	return k, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

func recv(t *testing.T, c <-chan clientv3.LeaseID, what string) clientv3.LeaseID {
	t.Helper()
	select {
	case id := <-c:
		return id
	case <-time.After(20 * time.Second):
		t.Fatalf("not within 20s: %s", what)
		return 0
	}
}

// A revoked lease ends the session; the keeper takes a new lease and the
// holder writes its key again under it, well within the TTL.
func TestRevokedLeaseIsReplacedAndKeysRewritten(t *testing.T) {
	_, cli := etcdtest.New(t)
	wrote := make(chan clientv3.LeaseID, 10)
	k, stop := start(t, Config{Client: cli, TTL: 30 * time.Second}, putHold(cli, wrote))
	first := recv(t, wrote, "first write")
	if got, err := keyLease(cli); err != nil || got != first || k.Lease() != first {
		t.Fatalf("key lease %d (%v), keeper %d, want %d", got, err, k.Lease(), first)
	}
	if _, err := cli.Revoke(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	second := recv(t, wrote, "write under a new lease after the revoke")
	if second == first {
		t.Fatal("same lease held twice")
	}
	// The bound is far below the 30s TTL: the keeper saw the loss, it did
	// not wait for an expiry.
	poll.Eventually(t, 10*time.Second, "key back under the new lease", func() error {
		got, err := keyLease(cli)
		if err != nil || got != second {
			return fmt.Errorf("key lease %d (%v), want %d", got, err, second)
		}
		return nil
	})
	stop()
	if got, err := keyLease(cli); err != nil || got != 0 {
		t.Fatalf("after stop: key lease %d (%v), want the key gone with its revoked lease", got, err)
	}
	if k.Lease() != 0 {
		t.Fatalf("after stop the keeper still reports lease %d", k.Lease())
	}
}

// A holder that finds its lease gone (ErrLost) gets a new one; the old one
// is revoked, so no key outlives its session.
func TestHolderReportingLossGetsANewLease(t *testing.T) {
	_, cli := etcdtest.New(t)
	granted := make(chan clientv3.LeaseID, 10)
	calls := 0
	hold := func(ctx context.Context, id clientv3.LeaseID) error {
		calls++
		if calls == 1 {
			return fmt.Errorf("put: %w", ErrLost)
		}
		<-ctx.Done()
		return nil
	}
	_, stop := start(t, Config{Client: cli, TTL: 30 * time.Second, Hooks: Hooks{Granted: func(id clientv3.LeaseID) { granted <- id }}}, hold)
	defer stop()
	first := recv(t, granted, "first lease")
	second := recv(t, granted, "second lease after ErrLost")
	if second == first {
		t.Fatal("same lease granted twice")
	}
	poll.Eventually(t, 10*time.Second, "first lease revoked", func() error {
		r, err := cli.TimeToLive(context.Background(), first)
		if err != nil {
			return err
		}
		if r.TTL != -1 {
			return fmt.Errorf("lease %d still has TTL %ds", first, r.TTL)
		}
		return nil
	})
}

// After Abandon the lease is not revoked at stop: the key stays until the
// TTL expires, as after a crash.
func TestAbandonLeavesKeyUntilTTL(t *testing.T) {
	_, cli := etcdtest.New(t)
	wrote := make(chan clientv3.LeaseID, 10)
	k, stop := start(t, Config{Client: cli, TTL: 2 * time.Second}, putHold(cli, wrote))
	id := recv(t, wrote, "first write")
	k.Abandon()
	stop()
	if got, err := keyLease(cli); err != nil || got != id {
		t.Fatalf("right after an abandoning stop: key lease %d (%v), want %d", got, err, id)
	}
	poll.Eventually(t, 20*time.Second, "key expired with its lease", func() error {
		got, err := keyLease(cli)
		if err != nil || got != 0 {
			return fmt.Errorf("key lease %d (%v)", got, err)
		}
		return nil
	})
}

func TestIsLost(t *testing.T) {
	if !IsLost(fmt.Errorf("put: %w", ErrLost)) || IsLost(errors.New("timeout")) || IsLost(nil) {
		t.Fatal("IsLost misjudges")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{TTL: time.Second}); err == nil {
		t.Error("nil client accepted")
	}
	_, cli := etcdtest.New(t)
	if _, err := New(Config{Client: cli, TTL: 500 * time.Millisecond}); err == nil {
		t.Error("sub-second TTL accepted")
	}
}

// A holder that fails with the lease alive does not make the keeper spin:
// the next lease comes after a backoff delay.
func TestFailingHolderBacksOff(t *testing.T) {
	_, cli := etcdtest.New(t)
	granted := make(chan time.Time, 10)
	hold := func(ctx context.Context, id clientv3.LeaseID) error { return errors.New("holder broke") }
	_, stop := start(t, Config{Client: cli, TTL: 30 * time.Second, Backoff: backoff.Policy{Min: 400 * time.Millisecond, Max: 400 * time.Millisecond},
		Hooks: Hooks{Granted: func(clientv3.LeaseID) { granted <- time.Now() }}}, hold)
	defer stop()
	first := <-granted
	var second time.Time
	select {
	case second = <-granted:
	case <-time.After(20 * time.Second):
		t.Fatal("no second lease")
	}
	// Jittered into [Min/2, Min): at least 200ms apart.
	if gap := second.Sub(first); gap < 200*time.Millisecond {
		t.Fatalf("second lease %s after the first, want a backoff of at least 200ms", gap)
	}
}
