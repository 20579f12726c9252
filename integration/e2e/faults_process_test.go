//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

// steadyLoad sends GETs to every proxy of pc from 4 workers until stopped
// and counts failures and the slowest answer.
type steadyLoad struct {
	stop          chan struct{}
	wg            sync.WaitGroup
	sent, failed  atomic.Int64
	slowestMillis atomic.Int64
	mu            sync.Mutex
	failures      map[string]int
}

func startLoad(urls []string, ipBase int) *steadyLoad {
	l := &steadyLoad{stop: make(chan struct{}), failures: map[string]int{}}
	for w := 0; w < 4; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			for i := 0; ; i++ {
				for _, u := range urls {
					select {
					case <-l.stop:
						return
					default:
					}
					began := time.Now()
					o := do("GET", u+"/", fmt.Sprintf("10.%d.%d.%d", ipBase, w, i%250))
					ms := time.Since(began).Milliseconds()
					for {
						cur := l.slowestMillis.Load()
						if ms <= cur || l.slowestMillis.CompareAndSwap(cur, ms) {
							break
						}
					}
					l.sent.Add(1)
					if o.Err != nil || o.Status != 200 {
						l.failed.Add(1)
						l.mu.Lock()
						l.failures[fmt.Sprintf("%d %v %s", o.Status, o.Err, o.Reason)]++
						l.mu.Unlock()
					}
				}
			}
		}(w)
	}
	return l
}

// end stops the load and returns failed, sent and the slowest answer.
func (l *steadyLoad) end() (failed, sent int64, slowest time.Duration, failures map[string]int) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	return l.failed.Load(), l.sent.Load(), time.Duration(l.slowestMillis.Load()) * time.Millisecond, l.failures
}

func (l *steadyLoad) waitSent(t *testing.T, n int64) {
	t.Helper()
	base := l.sent.Load()
	eventually(t, 20*time.Second, "traffic flowing", func() error {
		if got := l.sent.Load() - base; got < n {
			return fmt.Errorf("%d sent", got)
		}
		return nil
	})
}

// Catalogue D1-2: a backend that hangs — SIGSTOPped, so the kernel still
// accepts its connections and nothing ever answers. With a 1 s response
// header timeout, every GET that tried it is retried on another instance:
// 0 failed requests, no answer slower than the timeout plus a margin; the
// proxies' health checks exclude it; after SIGCONT it is back in rotation
// (time measured from the SIGCONT).
func TestFaultsBackendHangs(t *testing.T) {
	state := bytes.Replace(fleet.DemoState, []byte("timeouts: {connect: 500ms}"), []byte("timeouts: {connect: 500ms, response_header: 1s}"), 1)
	if bytes.Equal(state, fleet.DemoState) {
		t.Fatal("demo state has no `timeouts: {connect: 500ms}` line to extend")
	}
	f := startFleet(t, fleet.Options{State: state})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE2", 30*time.Second)
	victim := f.BackendsOf("demo-main", "SC2")[0]
	l := startLoad(proxyURLs(f, "BFE2"), 21)
	defer l.end()
	l.waitSent(t, 200)
	if err := victim.Proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer victim.Proc.Signal(syscall.SIGCONT)
	for _, p := range f.ProxiesOf("BFE2") {
		eventually(t, 20*time.Second, p.ID+" excludes the hung "+victim.Addr, func() error {
			return instanceExcluded(p.AdminURL, "demo-main", victim.Addr)
		})
	}
	excluded := time.Since(stopped)
	l.waitSent(t, 200)
	failed, sent, slowest, failures := l.end()
	t.Logf("D1-2 backend %s hung (SIGSTOP): %d of %d GETs failed, slowest answer %.2f s; excluded by every BFE2 proxy %.1f s after the stop",
		victim.Addr, failed, sent, slowest.Seconds(), excluded.Seconds())
	if failed != 0 {
		t.Errorf("D1-2: %d of %d GETs failed with one backend hung: %v", failed, sent, failures)
	}
	if slowest > 3*time.Second {
		t.Errorf("D1-2: slowest answer %s, want ≤ 3 s (response header timeout 1 s, then a retry)", slowest)
	}
	if err := victim.Proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	for _, p := range f.ProxiesOf("BFE2") {
		eventually(t, 30*time.Second, p.ID+" serves "+victim.Addr+" again", func() error {
			if err := instanceExcluded(p.AdminURL, "demo-main", victim.Addr); err == nil {
				return fmt.Errorf("%s still out of service", victim.Addr)
			}
			return nil
		})
	}
	t.Logf("D1-2: back in rotation on every BFE2 proxy %.1f s after SIGCONT", time.Since(healed).Seconds())
}

// Catalogue C9: one proxy SIGSTOPped for 6 s while a new version is
// published. The other proxy of the cluster serves every request (0
// failed); after SIGCONT the paused one applies the new version and
// serves (time to recover measured from the SIGCONT).
func TestFaultsProxyPaused(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	v := waitApplied(t, f, "BFE2", 30*time.Second)
	paused, other := f.ProxiesOf("BFE2")[0], f.ProxiesOf("BFE2")[1]
	l := startLoad([]string{other.URL}, 22)
	defer l.end()
	l.waitSent(t, 100)
	if err := paused.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer paused.Signal(syscall.SIGCONT)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=30", "SC2=70", "--reason", "while a proxy is paused", "--yes")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d %v\n%s", code, err, out)
	}
	var nv uint64
	eventually(t, 30*time.Second, "the new version reaches the running proxy", func() error {
		var st struct {
			AppliedVersion uint64 `json:"applied_version"`
		}
		if err := getJSON(other.AdminURL+"/v1/status", &st); err != nil {
			return err
		}
		if st.AppliedVersion <= v {
			return fmt.Errorf("%s applied v%d", other.ID, st.AppliedVersion)
		}
		nv = st.AppliedVersion
		return nil
	})
	// Keep it stopped 6 s in all (a deadline, not a wait for state).
	time.Sleep(time.Until(began.Add(6 * time.Second)))
	if err := paused.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	eventually(t, 30*time.Second, paused.ID+" applies v"+fmt.Sprint(nv)+" after SIGCONT", func() error {
		var st struct {
			AppliedVersion uint64 `json:"applied_version"`
		}
		if err := getJSON(paused.AdminURL+"/v1/status", &st); err != nil {
			return err
		}
		if st.AppliedVersion < nv {
			return fmt.Errorf("%s applied v%d", paused.ID, st.AppliedVersion)
		}
		return nil
	})
	recovered := time.Since(healed)
	failed, sent, _, failures := l.end()
	if failed != 0 {
		t.Errorf("C9: %d of %d requests to %s failed while %s was paused: %v", failed, sent, other.ID, paused.ID, failures)
	}
	outs := load(paused.URL+"/", 200, 4, 230000)
	pf, ps := failedOf(outs)
	t.Logf("C9 %s SIGSTOPped 6 s: %d of %d requests to %s failed; after SIGCONT it applied v%d in %.1f s and failed %d of %d requests",
		paused.ID, failed, sent, other.ID, nv, recovered.Seconds(), pf, ps)
	if pf != 0 {
		t.Errorf("C9: %d of %d requests to %s failed after SIGCONT", pf, ps, paused.ID)
	}
}

// Catalogue B7: leadership flapping. Two schedulers; four times the leader
// is SIGSTOPped past its session TTL (3 s), the other takes over and
// publishes an operator change, then the old one gets SIGCONT. Each change
// is published by the scheduler that led when it was made, the authors of
// the history form at most one run per term (no interleaving: one publisher
// at a time, I6), and the proxies' applied versions never go back (I1).
func TestFaultsLeadershipFlapping(t *testing.T) {
	f := startFleet(t, fleet.Options{Schedulers: 2})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	first := waitApplied(t, f, "BFE2", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// I1 sampler: every proxy's applied version, every 100 ms.
	var regressions atomic.Int64
	var regressionSeen atomic.Value
	stopSampler := make(chan struct{})
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	go func() {
		defer samplerDone.Done()
		last := map[string]uint64{}
		for {
			select {
			case <-stopSampler:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, p := range f.ProxiesOf("BFE2") {
				var st struct {
					AppliedVersion uint64 `json:"applied_version"`
				}
				if getJSON(p.AdminURL+"/v1/status", &st) != nil {
					continue
				}
				if st.AppliedVersion < last[p.ID] {
					regressions.Add(1)
					regressionSeen.Store(fmt.Sprintf("%s v%d after v%d", p.ID, st.AppliedVersion, last[p.ID]))
				}
				last[p.ID] = st.AppliedVersion
			}
		}
	}()
	defer func() { close(stopSampler); samplerDone.Wait() }()

	const rounds = 4
	var takeovers []time.Duration
	for r := 0; r < rounds; r++ {
		old := leaderIndex(t, f)
		oldID := fmt.Sprintf("sched-%d", old+1)
		if err := f.Schedulers[old].Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		var newIdx int
		eventually(t, 30*time.Second, "round "+fmt.Sprint(r)+": the other scheduler leads", func() error {
			if newIdx = leaderIndex(t, f); newIdx == old {
				return fmt.Errorf("%s still holds the leader key", oldID)
			}
			return nil
		})
		takeovers = append(takeovers, time.Since(stopped))
		newID := fmt.Sprintf("sched-%d", newIdx+1)
		sc1 := 20 + 10*r
		out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2",
			fmt.Sprintf("SC1=%d", sc1), fmt.Sprintf("SC2=%d", 100-sc1), "--reason", fmt.Sprintf("flap %d", r), "--yes")
		if err != nil || code != 0 {
			t.Fatalf("lbctl weights set: exit %d %v\n%s", code, err, out)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("round %d: %s publishes SC1=%d", r, newID, sc1), func() error {
			s, err := liveSnapshot(ctx, f, "BFE2")
			if err != nil {
				return err
			}
			if s.Clusters["demo-main"].Row.Weights["SC1"] != sc1 {
				return fmt.Errorf("v%d row %v", s.Meta.Version, s.Clusters["demo-main"].Row.Weights)
			}
			if !strings.HasSuffix(s.Meta.Author, newID) {
				return fmt.Errorf("v%d with SC1=%d authored by %q while %s leads", s.Meta.Version, sc1, s.Meta.Author, newID)
			}
			return nil
		})
		if err := f.Schedulers[old].Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	last := waitApplied(t, f, "BFE2", 30*time.Second)

	// The history's authors: one run per term at most.
	var authors []string
	runs := 0
	for v := first + 1; v <= last; v++ {
		s, err := f.Snapshot(ctx, "BFE2", v)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if len(authors) == 0 || authors[len(authors)-1] != s.Meta.Author {
			runs++
		}
		authors = append(authors, s.Meta.Author)
	}
	t.Logf("B7 %d pauses of the leader: takeovers after %v; versions v%d..v%d by %v (%d author runs); %d I1 regressions seen",
		rounds, takeovers, first+1, last, authors, runs, regressions.Load())
	if runs > rounds+1 {
		t.Errorf("I6: %d author runs over %d terms: two schedulers published in one term (%v)", runs, rounds+1, authors)
	}
	if n := regressions.Load(); n != 0 {
		t.Errorf("I1: %d applied-version regressions, e.g. %v", n, regressionSeen.Load())
	}
}
