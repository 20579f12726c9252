package lbctl

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// rollout status --watch prints the rollout again on every change in etcd
// (PENDING, then SYNCED and converged) and ends with exit 0 with its
// context; --watch and --wait exclude each other (nothing is watched).
func TestRolloutStatusWatch(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 2, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 1, EtcdConnected: true, UpdatedAt: time.Now()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb, done := h.start(ctx, "rollout", "status", "--watch")
	poll.EventuallyTrue(t, 20*time.Second, "the first table (PENDING)", func() bool { return strings.Contains(out.String(), "PENDING") })
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 2, EtcdConnected: true, UpdatedAt: time.Now()})
	poll.EventuallyTrue(t, 20*time.Second, "the redraw (SYNCED, converged)", func() bool { return strings.Contains(out.String(), "converged: every live proxy") })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not end")
	}
	s := out.String()
	if n := strings.Count(s, "PROXY CLUSTER"); n != 2 {
		t.Fatalf("%d tables, want 2:\n%s", n, s)
	}
	first, _, _ := strings.Cut(s[len("PROXY CLUSTER"):], "PROXY CLUSTER")
	if !strings.Contains(first, "PENDING") || strings.Contains(first, "converged") || !strings.Contains(s, "no scheduler is leading") {
		t.Fatalf("first table:\n%s\nall:\n%s", first, s)
	}

	_, errs, code := h.run("", "rollout", "status", "--watch", "--wait")
	if code == 0 || !strings.Contains(errs, "--watch and --wait exclude each other") {
		t.Fatalf("--watch --wait: exit %d\n%s", code, errs)
	}
}

// start runs lbctl with args (after --endpoints) in the background until ctx
// ends; done receives its exit code.
func (h *harness) start(ctx context.Context, args ...string) (out, errb *syncbuf.Buffer, done <-chan int) {
	out, errb = new(syncbuf.Buffer), new(syncbuf.Buffer)
	ch := make(chan int, 1)
	go func() {
		ch <- MainContext(ctx, append([]string{"lbctl", "--endpoints", strings.Join(h.srv.Endpoints, ",")}, args...), out, errb, strings.NewReader(""))
	}()
	return out, errb, ch
}
