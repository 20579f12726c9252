package lbctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/scheduler/lbscheduler"
	"github.com/sluicelb/sluice/testkit/poll"
)

// plan --what-if asks a real scheduler (found through its leader key) and
// publishes nothing.
func TestPlanWhatIfAgainstScheduler(t *testing.T) {
	h := newHarness(t)
	h.mustRun("apply", "-f", "testdata/static.yaml", "--yes")
	h.startScheduler("")
	deadline := time.Now().Add(30 * time.Second)
	poll.EventuallyTrue(t, time.Until(deadline), "a scheduler leader", func() bool {
		r, err := h.cli.Get(context.Background(), h.layout.Leader())
		if err != nil || len(r.Kvs) != 1 {
			return false
		}
		var l report.Leader
		return codec.UnmarshalJSON(r.Kvs[0].Value, &l) == nil && l.APIAddr != ""
	})
	// The first publication of every proxy cluster of static.yaml: one
	// appearing after "before" was read would look like a what-if publishing.
	poll.EventuallyTrue(t, time.Until(deadline), "BFE1 and BFE2 published", func() bool {
		p, err := h.pointersNow()
		return err == nil && p["BFE1"] > 0 && p["BFE2"] > 0
	})
	before, _ := h.pointersNow()
	out := h.mustRun("plan", "--what-if", "drain demo-main/SC1", "--cluster", "demo-main")
	if !strings.Contains(out, "WHAT-IF (not published)") || !strings.Contains(out, "BFE1") {
		t.Fatalf("plan output:\n%s", out)
	}
	var doc planDoc
	if err := json.Unmarshal([]byte(h.mustRun("-o", "json", "plan", "--what-if", "drain demo-main/SC1")), &doc); err != nil {
		t.Fatal(err)
	}
	for pc, p := range doc.ProxyClusters {
		if w := p.Rows["demo-main"].Row.Weights["SC1"]; w != 0 {
			t.Errorf("%s: SC1 weight %d under a drain what-if", pc, w)
		}
	}
	if after, _ := h.pointersNow(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a what-if published: %v → %v", before, after)
	}
	if _, errs, code := h.run("", "plan", "--what-if", "drain demo-main/NOPE"); code == 0 || !strings.Contains(errs, "NOPE") {
		t.Fatalf("unknown sub-cluster what-if: exit %d %s", code, errs)
	}
}

func (h *harness) pointersNow() (map[string]uint64, error) {
	e := &env{layout: h.layout, client: h.cli}
	ps, err := e.pointers(context.Background())
	out := map[string]uint64{}
	for k, p := range ps {
		out[k] = p.Version
	}
	return out, err
}

// An API that does not answer is retried with backoff, then reported once.
func TestAPICallsRetryThenFailClearly(t *testing.T) {
	h := newHarness(t)
	start := time.Now()
	_, errs, code := h.run("", "--scheduler", "http://127.0.0.1:1", "plan")
	if code != ExitError || !strings.Contains(errs, "giving up after 4 attempt(s)") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Fatalf("gave up after %s: no backoff between tries", d)
	}
}

// startScheduler runs a scheduler (id s1, API on a free port, bearer token
// token when not empty) on the harness's etcd until the test ends.
func (h *harness) startScheduler(token string) *lbscheduler.Scheduler {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := lbscheduler.Start(ctx, lbscheduler.Config{ID: "s1", Client: h.cli, APIAddr: "127.0.0.1:0", APIToken: token,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		cancel()
		s.Wait()
	})
	return s
}
