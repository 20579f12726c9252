package etcdtest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartPutGetRestart(t *testing.T) {
	s, c := New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("got %v", r.Kvs)
	}
}

func TestStopTwiceThenCleanup(t *testing.T) {
	s, _ := New(t)
	s.Stop()
	s.Stop() // and the cleanup stops it a third time
}
