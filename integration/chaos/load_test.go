//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Outcome is one client request as the client saw it.
type Outcome struct {
	Seq        int64     `json:"seq"`
	Proxy      string    `json:"proxy"`
	Path       string    `json:"path"`
	Start      time.Time `json:"start"`
	Millis     float64   `json:"ms"`
	Status     int       `json:"status,omitempty"`
	Reason     string    `json:"reason,omitempty"` // X-Sluice-Reason of generated answers
	SubCluster string    `json:"subcluster,omitempty"`
	Instance   string    `json:"instance,omitempty"`
	Err        string    `json:"err,omitempty"`
	Reset      bool      `json:"reset,omitempty"` // connection reset / unexpected EOF
}

// Kind classifies an outcome: ok (a backend answered), blackhole (dropped by
// the row's GSLB_BLACKHOLE share, 503 + X-Sluice-Reason: blackhole) or fail.
func (o Outcome) Kind() string {
	switch {
	case o.Err == "" && o.Status == http.StatusOK && o.SubCluster != "":
		return "ok"
	case o.Err == "" && o.Status == http.StatusServiceUnavailable && o.Reason == "blackhole":
		return "blackhole"
	}
	return "fail"
}

// runID makes request paths unique across suite runs against the same
// backends.
var runID = time.Now().UTC().Format("20060102T150405")

// Load sends GET requests through every proxy at a fixed rate per worker and
// records each outcome. Paths are unique (/chaos/<scenario>/<seq>) so a
// backend's /stats tells which requests reached it.
type Load struct {
	scenario string
	mu       sync.Mutex
	out      []Outcome
	seq      int64
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	clients  []*http.Client
	maxGap   time.Duration // longest delay of a 100 ms ticker in this process
}

// startLoad starts workersPerProxy workers per proxy, each at rps requests/s.
func startLoad(scenario string, workersPerProxy int, rps float64) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{scenario: scenario, cancel: cancel}
	for _, p := range proxies {
		for w := 0; w < workersPerProxy; w++ {
			// A generous timeout: a slow answer is not a failure (the 2-core
			// machine can starve everything for seconds); its latency is
			// recorded and reported.
			c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
				MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second,
				DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			}}
			l.clients = append(l.clients, c)
			l.wg.Add(1)
			go l.worker(ctx, p, c, time.Duration(float64(time.Second)/rps))
		}
	}
	l.wg.Add(1)
	go l.watchStalls(ctx)
	return l
}

// watchStalls measures how late a 100 ms ticker fires: a gap of seconds
// means the whole machine (this client included) was starved, which
// explains slow requests that are no fault of the fleet.
func (l *Load) watchStalls(ctx context.Context) {
	defer l.wg.Done()
	const every = 100 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if gap := now.Sub(last) - every; gap > 0 {
				l.mu.Lock()
				l.maxGap = max(l.maxGap, gap)
				l.mu.Unlock()
			}
			last = now
		}
	}
}

// MaxStall is the longest extra delay of the client's own 100 ms ticker.
func (l *Load) MaxStall() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxGap
}

func (l *Load) worker(ctx context.Context, p Proxy, c *http.Client, every time.Duration) {
	defer l.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		l.seq++
		seq := l.seq
		l.mu.Unlock()
		o := l.one(ctx, p, c, seq)
		if ctx.Err() != nil && o.Err != "" {
			return // cancelled mid-request: not an outcome
		}
		l.mu.Lock()
		l.out = append(l.out, o)
		l.mu.Unlock()
	}
}

func (l *Load) one(ctx context.Context, p Proxy, c *http.Client, seq int64) Outcome {
	o := Outcome{Seq: seq, Proxy: p.ID, Path: fmt.Sprintf("/chaos/%s/%s/%d", runID, l.scenario, seq), Start: time.Now()}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+o.Path, nil)
	req.Host = "demo.local"
	resp, err := c.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		o.Status = resp.StatusCode
		o.Reason = resp.Header.Get("X-Sluice-Reason")
		o.SubCluster = resp.Header.Get("X-Sluice-Backend-Subcluster")
		o.Instance = resp.Header.Get("X-Sluice-Backend-Instance")
	}
	if err != nil {
		o.Err = err.Error()
		o.Reset = errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) ||
			(errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "refused"))
	}
	o.Millis = float64(time.Since(o.Start).Microseconds()) / 1000
	return o
}

// Stop ends the load and returns every outcome, also written to
// <dir>/outcomes.jsonl.
func (l *Load) Stop(dir string) ([]Outcome, error) {
	l.cancel()
	l.wg.Wait()
	for _, c := range l.clients {
		c.CloseIdleConnections()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Create(filepath.Join(dir, "outcomes.jsonl"))
	if err != nil {
		return l.out, err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, o := range l.out {
		if err := enc.Encode(o); err != nil {
			return l.out, err
		}
	}
	return l.out, bw.Flush()
}

// Count returns how many outcomes are recorded so far.
func (l *Load) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.out)
}

// Tally counts outcomes.
type Tally struct {
	Total, OK, Blackhole, Fail, Reset int
	P99, Max                          float64 // latency in ms
	BySub                             map[string]int
	FailSample                        []string
}

func tally(outs []Outcome, keep func(Outcome) bool) (t Tally) {
	t = Tally{BySub: map[string]int{}}
	var lat []float64
	defer func() {
		if len(lat) > 0 {
			slices.Sort(lat)
			t.P99, t.Max = lat[len(lat)*99/100], lat[len(lat)-1]
		}
	}()
	for _, o := range outs {
		if keep != nil && !keep(o) {
			continue
		}
		t.Total++
		lat = append(lat, o.Millis)
		if o.Reset {
			t.Reset++
		}
		switch o.Kind() {
		case "ok":
			t.OK++
			t.BySub[o.SubCluster]++
		case "blackhole":
			t.Blackhole++
		default:
			t.Fail++
			if len(t.FailSample) < 5 {
				t.FailSample = append(t.FailSample, fmt.Sprintf("%s %s status=%d reason=%q err=%q", o.Proxy, o.Path, o.Status, o.Reason, o.Err))
			}
		}
	}
	return t
}

func onCluster(pc string) func(Outcome) bool {
	return func(o Outcome) bool { return strings.HasPrefix(o.Proxy, strings.ToLower(pc)+"-") }
}

// snapshotSince returns a copy of the outcomes of requests started at or
// after from.
func (l *Load) snapshotSince(from time.Time) []Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Outcome
	for _, o := range l.out {
		if !o.Start.Before(from) {
			out = append(out, o)
		}
	}
	return out
}
