package etcdwatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// firstRestart keeps the first OnRestart call.
type firstRestart struct {
	ch chan restartCall
}

type restartCall struct {
	reason Reason
	listed bool
	err    error
}

func (f *firstRestart) on(reason Reason, listed bool, err error) {
	select {
	case f.ch <- restartCall{reason, listed, err}:
	default:
	}
}

// A read permission revoked under an open watch ends the round as a sync
// error, not as another store: the store check is refused (etcd checks a
// watch's permission only when it is made), and the round reports it with
// the listing it had made.
func TestRevokedReadEndsTheRoundAsSyncError(t *testing.T) {
	const user, password, prefix = "proxy", "proxy-secret", "/w/"
	srv, root := etcdtest.NewWithAuth(t, etcdtest.Options{}, user, password, prefix)
	if _, err := root.Put(context.Background(), "/w/current/X", "v1"); err != nil {
		t.Fatal(err)
	}
	cli, err := srv.ClientAs(user, password)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s := newRecSink(false)
	first := &firstRestart{ch: make(chan restartCall, 1)}
	run(t, Config{Client: cli, Key: "/w/current/X", StallTimeout: time.Minute, StoreCheckInterval: 50 * time.Millisecond,
		Logger: quiet, OnRestart: first.on}, s)
	<-s.listed
	// The watch is open once it delivers a write made after the listing.
	if _, err := root.Put(context.Background(), "/w/current/X", "v2"); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "v2 delivered by the watch", func() bool { keys, _ := s.snapshot(); return keys["/w/current/X"] == "v2" })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Revoke(ctx, user, prefix); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-first.ch:
		if r.reason != ReasonSyncError || !r.listed || !errors.Is(r.err, errAccessLost) ||
			!strings.HasPrefix(r.err.Error(), "store check /w/current/X: read permission lost: ") {
			t.Fatalf("first restart: reason %s, listed %v, err %v; want sync_error after a listing, wrapping errAccessLost", r.reason, r.listed, r.err)
		}
	case <-ctx.Done():
		t.Fatal("no restart within 20s of the revoke")
	}
}

// fill gives every unset or negative duration its default.
func TestFillDefaults(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		c := Config{Client: &clientv3.Client{}, Key: "/k", StallTimeout: d, OpTimeout: d, StoreCheckInterval: d}
		if err := c.fill(); err != nil {
			t.Fatal(err)
		}
		if c.StallTimeout != 30*time.Second || c.OpTimeout != 5*time.Second || c.StoreCheckInterval != 3*time.Second || c.Logger == nil {
			t.Fatalf("from %v: stall %v, op %v, store check %v, logger %v; want 30s, 5s, 3s and the default logger",
				d, c.StallTimeout, c.OpTimeout, c.StoreCheckInterval, c.Logger)
		}
	}
	c := Config{Client: &clientv3.Client{}, Key: "/k", StallTimeout: time.Second, OpTimeout: 2 * time.Second, StoreCheckInterval: 3 * time.Millisecond, Logger: quiet}
	if err := c.fill(); err != nil {
		t.Fatal(err)
	}
	if c.StallTimeout != time.Second || c.OpTimeout != 2*time.Second || c.StoreCheckInterval != 3*time.Millisecond || c.Logger != quiet {
		t.Fatalf("set values changed: stall %v, op %v, store check %v", c.StallTimeout, c.OpTimeout, c.StoreCheckInterval)
	}
}
