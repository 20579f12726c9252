package lbproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// testClock is a clock the test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *testClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Config.Now is the proxy's one clock: the status and demand reports, the
// config watch's applied time and the balancer's override TTLs all read it.
// The clock stands years from the real one, so a stamp taken anywhere else
// shows.
func TestConfigNowIsTheProxysClock(t *testing.T) {
	_, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	t0 := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	clk := &testClock{t: t0}
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir(), Now: clk.now})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))

	get := func(key string, v any) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := cli.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(res.Kvs) != 1 {
			return fmt.Errorf("%s absent", key)
		}
		return json.Unmarshal(res.Kvs[0].Value, v)
	}
	statusKey, _ := layout.Status("BFE1", "p1")
	demandKey, _ := layout.Demand("BFE1", "p1")
	var st report.ProxyStatus
	poll.Eventually(t, 15*time.Second, "status report of v1", func() error {
		if err := get(statusKey, &st); err != nil {
			return err
		}
		if st.AppliedVersion != 1 {
			return fmt.Errorf("applied v%d", st.AppliedVersion)
		}
		return nil
	})
	if !st.StartedAt.Equal(t0) || !st.UpdatedAt.Equal(t0) || !st.AppliedAt.Equal(t0) {
		t.Fatalf("status report started %s, updated %s, applied %s; want all %s (Config.Now)", st.StartedAt, st.UpdatedAt, st.AppliedAt, t0)
	}
	var d report.Demand
	poll.Eventually(t, 15*time.Second, "demand report", func() error { return get(demandKey, &d) })
	if !d.UpdatedAt.Equal(t0) {
		t.Fatalf("demand report updated %s, want %s (Config.Now)", d.UpdatedAt, t0)
	}
	if a := adminStatus(t, r).AppliedAt; !a.Equal(t0) {
		t.Fatalf("/v1/status applied_at %s, want %s (Config.Now)", a, t0)
	}

	base := "http://" + r.addrs.Admin
	addr := strings.TrimPrefix(b1.URL, "http://")
	if code, e := adminDo(t, "POST", base+"/v1/overrides", `{"addr":"`+addr+`","drain":true,"ttl":"1m"}`); code != 200 {
		t.Fatalf("set override: %d %v", code, e)
	}
	listed := func() bool {
		code, e := adminDo(t, "GET", base+"/v1/overrides", "")
		if code != 200 {
			t.Fatalf("list overrides: %d %v", code, e)
		}
		_, ok := e[addr]
		return ok
	}
	clk.add(time.Minute - time.Nanosecond)
	if !listed() {
		t.Fatal("override of 1m gone after 1m-1ns on Config.Now")
	}
	clk.add(time.Nanosecond)
	if listed() {
		t.Fatal("override of 1m still listed 1m later on Config.Now")
	}
}
