package server

import (
	"net/http"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/forward"
)

// D4, the rule itself (tryAgain is pure): a request whose body bytes were
// already taken from the client is never retried unless it is replayable —
// whatever the failure, a dial error, the local pool limit or a stale
// keep-alive connection none of whose bytes reached the socket included.
// Before this test the mutants "stale: replayable || f.unsent" and "dial:
// always retry" failed no test.
func TestTryAgainNeverResendsATakenBody(t *testing.T) {
	kinds := map[failKind]string{failDial: "dial", failPoolFull: "pool-full", failTimeout: "timeout", failUpstream: "upstream",
		failStatus: "status", failDeadline: "deadline", failClient: "client", failBody: "body", failStale: "stale"}
	for k, name := range kinds {
		for _, unsent := range []bool{false, true} {
			f := &failure{kind: k, unsent: unsent}
			if tryAgain(f, false, true) {
				t.Errorf("%s (unsent %v): retried a non-replayable request whose body was partly taken from the client", name, unsent)
			}
		}
	}
	// What may be retried: nothing sent and no body taken, or replayable.
	want := []struct {
		k                          failKind
		unsent, replayable, bodyIn bool
		retry                      bool
	}{
		{failDial, false, false, false, true},
		{failPoolFull, false, false, false, true},
		{failStale, true, false, false, true},
		{failStale, false, false, false, false}, // bytes reached the backend
		{failStale, false, true, true, true},
		{failUpstream, false, false, false, false},
		{failUpstream, false, true, false, true},
		{failTimeout, false, true, false, true},
		{failDeadline, false, true, false, false},
		{failClient, false, true, false, false},
		{failBody, false, true, false, false},
	}
	for _, w := range want {
		if got := tryAgain(&failure{kind: w.k, unsent: w.unsent}, w.replayable, w.bodyIn); got != w.retry {
			t.Errorf("tryAgain(%s, unsent %v, replayable %v, body taken %v) = %v, want %v", kinds[w.k], w.unsent, w.replayable, w.bodyIn, got, w.retry)
		}
	}
}

// D5 at server level: a retry never goes to an instance already tried when
// the sub-cluster has others. Weights 10/1/1 make smooth WRR pick the heavy
// instance again and again, so only the tried-instance exclusion spreads the
// three attempts over the three (refusing) instances. Before this test the
// mutant "isTried always false" was caught by the balance package only.
func TestRetryNeverReusesTriedInstance(t *testing.T) {
	a, b, c := deadAddr(t), deadAddr(t), deadAddr(t)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(a, 10), inst(b, 1), inst(c, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Health.FailNum = 1000; p.Retry.RetryMax = 2; p.Retry.CrossRetry = 0 }))
	d := &recordingDialer{}
	p := newProxy(t, snap, proxyOpts{opts: Options{Pools: forward.NewPools(forward.Options{DialContext: d.dial})}})
	cl := client(t)
	for i := 0; i < 4; i++ {
		res, _ := get(t, cl, p.url+"/", nil)
		if res.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", res.StatusCode)
		}
		dials := d.take()
		seen := map[string]bool{}
		for _, x := range dials {
			if seen[x] {
				t.Fatalf("request %d: attempts %v: %s tried twice while others were untried", i, dials, x)
			}
			seen[x] = true
		}
		if len(dials) != 3 {
			t.Fatalf("request %d: %d attempts %v, want 3 (one per instance)", i, len(dials), dials)
		}
	}
}
