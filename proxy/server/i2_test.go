package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/poll"
)

// I2 under load: while tables are swapped continuously, every request reads
// one table — the instance it went to belongs to the snapshot version it is
// logged with — and no request fails. Even versions route to backend A,
// odd ones to B.
func TestI2OneTablePerRequestUnderSwaps(t *testing.T) {
	a, b := newBackend(t, "A", nil), newBackend(t, "B", nil)
	build := func(v uint64) *snapshot.Snapshot {
		be := a
		if v%2 == 1 {
			be = b
		}
		return testSnapshot(v, testCluster(map[string][]config.Instance{"SC1": {inst(be.addr, 1)}}, map[string]int{"SC1": 100}, nil))
	}
	var buf syncBuffer
	p := newProxy(t, build(2), proxyOpts{opts: Options{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil))}})
	c := client(t)

	var mu sync.Mutex
	answered := map[string]string{} // path → backend that answered
	var failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/w%d/%d", w, i)
				req, _ := http.NewRequest(http.MethodGet, p.url+path, nil)
				req.Host = "demo.test"
				res, err := c.Do(req)
				if err == nil {
					var body []byte
					body, err = io.ReadAll(res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: status %d %s", path, res.StatusCode, res.Header.Get(ReasonHeader))
					}
					mu.Lock()
					answered[path] = strings.TrimPrefix(string(body), "hello from ")
					mu.Unlock()
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	const last = 200
	for v := uint64(3); v <= last; v++ {
		if err := p.s.Apply(checked(t, build(v))); err != nil {
			t.Fatal(err)
		}
		if v%20 == 0 {
			// Ten requests between every twenty swaps, 100 in all: on a
			// loaded machine (GOMAXPROCS=1) the swaps alone could outrun
			// the clients (74 requests in one run).
			served := a.hits.Load() + b.hits.Load()
			poll.EventuallyTrue(t, 20*time.Second, "traffic between swaps", func() bool { return a.hits.Load()+b.hits.Load() >= served+10 })
		}
	}
	close(stop)
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed during swaps; first: %v", n, firstErr.Load())
	}
	// A line is written once its answer went out: the last ones may follow
	// the client's read.
	poll.EventuallyTrue(t, 20*time.Second, "100 access lines, one a request", func() bool { return len(buf.lines(t)) >= 100 })
	lines := buf.lines(t)
	if len(lines) < 100 {
		t.Fatalf("only %d requests during %d swaps; the test proved little", len(lines), last-2)
	}
	versions := map[float64]bool{}
	for _, l := range lines {
		v, _ := l["version"].(float64)
		versions[v] = true
		want, name := a.addr.String(), "A"
		if uint64(v)%2 == 1 {
			want, name = b.addr.String(), "B"
		}
		if l["instance"] != want {
			t.Fatalf("request %v logged with version %v went to %v, which is not in that table (%s); line %v", l["path"], v, l["instance"], want, l)
		}
		mu.Lock()
		got := answered[l["path"].(string)]
		mu.Unlock()
		if got != name {
			t.Fatalf("request %v logged with version %v (backend %s) was answered by %q", l["path"], v, name, got)
		}
	}
	if len(versions) < 10 {
		t.Fatalf("requests saw %d versions of %d; want the swaps to interleave with the load", len(versions), last-1)
	}
}
