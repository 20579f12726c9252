package lbctl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/proxy/lbproxy"
	"github.com/sluicelb/sluice/scheduler/lbscheduler"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// In process, real parts: a scheduler and two proxies run while etcd is
// wiped (a fresh store on the same address). The operator writes the
// desired state again; within 10 s the proxies run the new lineage and
// rollout status says converged.
func TestWipeUnderRunningProxiesInProcess(t *testing.T) {
	dir := t.TempDir()
	srv, err := etcdtest.Start(etcdtest.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	cli, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	h := &harness{t: t, srv: srv, cli: cli, layout: keys.MustNew("")}
	h.applyDemo()

	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sched, err := lbscheduler.Start(ctx, lbscheduler.Config{ID: "S1", Endpoints: srv.Endpoints, APIAddr: "127.0.0.1:0",
		SessionTTL: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for _, id := range []string{"p1", "p2"} {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		al, _ := net.Listen("tcp", "127.0.0.1:0")
		go func() {
			done <- lbproxy.Run(ctx, lbproxy.Config{ProxyCluster: "BFE1", ID: id, Etcd: lbproxy.Etcd{Endpoints: srv.Endpoints},
				Listener: l, AdminListener: al, CacheDir: t.TempDir(), TraceExporter: "none", Logger: quiet})
		}()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("lbproxy: %v", err)
			}
		}
		if err := sched.Wait(); err != nil {
			t.Errorf("lbscheduler: %v", err)
		}
	}()
	converged := func() bool {
		_, _, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE1")
		return code == 0
	}
	poll.EventuallyTrue(t, 20*time.Second, "first rollout converged", converged)
	old, err := h.pointersNow()
	if err != nil {
		t.Fatal(err)
	}
	oldLineage := h.lineage()

	srv.Stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	cp, pp := portOf(t, srv.Etcd.Config().ListenClientUrls[0].Host), portOf(t, srv.Etcd.Config().ListenPeerUrls[0].Host)
	fresh, err := etcdtest.Start(etcdtest.Options{Dir: dir, ClientPort: cp, PeerPort: pp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Stop)
	wiped := time.Now()
	h.srv = fresh
	h.applyDemo()
	last := ""
	defer func() { t.Logf("last: %s", last) }()
	poll.EventuallyTrue(t, 20*time.Second, "both proxies report the new lineage and rollout converged", func() bool {
		sts, err := h.statuses()
		if err != nil || len(sts) != 2 || h.lineage() == "" || h.lineage() == oldLineage {
			last = fmt.Sprintf("statuses %d %v, lineage %q", len(sts), err, h.lineage())
			return false
		}
		for _, st := range sts {
			if st.AppliedLineage != h.lineage() {
				last = fmt.Sprintf("%s on %q", st.ID, st.AppliedLineage)
				return false
			}
		}
		last = "rollout status"
		return converged()
	})
	took := time.Since(wiped)
	t.Logf("converged on lineage %s (was %s, BFE1 v%d) %v after the wipe", h.lineage(), oldLineage, old["BFE1"], took.Round(10*time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("took %v to converge after the wipe; want ≤ 10 s", took)
	}
	sts, err := h.statuses()
	if err != nil || len(sts) != 2 {
		t.Fatalf("statuses %v %v", sts, err)
	}
	for _, st := range sts {
		if st.AppliedLineage != h.lineage() || st.LineageChanges != 1 || st.PreviousLineage != oldLineage {
			t.Errorf("%s: %+v", st.ID, st)
		}
	}
}

// lineage reads the lineage id under the prefix ("" if none).
func (h *harness) lineage() string {
	h.t.Helper()
	ptrs, err := h.pointersNowFull()
	if err != nil {
		return ""
	}
	return ptrs["BFE1"].Lineage
}

func portOf(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *harness) pointersNowFull() (map[string]snapshot.Pointer, error) {
	e := &env{layout: h.layout, client: h.cli}
	return e.pointers(context.Background())
}

func (h *harness) statuses() ([]report.ProxyStatus, error) {
	e := &env{layout: h.layout, client: h.cli}
	return e.proxyStatuses(context.Background(), "BFE1")
}
