//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
	"github.com/sluicelb/sluice/testkit/poll"
)

var binDir string

func TestMain(m *testing.M) {
	binDir = os.Getenv("SLUICE_BIN")
	if binDir == "" {
		binDir = filepath.Join("..", "..", "bin")
	}
	binDir, _ = filepath.Abs(binDir)
	for _, b := range []string{"lbproxy", "lbscheduler", "lbagent", "lbctl", "demo-backend"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s missing in %s: run `make e2e` (it builds them) or set SLUICE_BIN\n", b, binDir)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// desiredRevision is N in the first "(desired state revision N)" of s, the
// line lbctl and the dashboard print for a write of the desired state.
func desiredRevision(t *testing.T, s string) int64 {
	t.Helper()
	i := strings.Index(s, "(desired state revision ")
	var rev int64
	if i < 0 {
		t.Fatalf("no desired state revision in %q", s)
	}
	if _, err := fmt.Sscanf(s[i:], "(desired state revision %d)", &rev); err != nil {
		t.Fatalf("desired state revision in %q: %v", s, err)
	}
	return rev
}

// startFleet starts a fresh fleet for one scenario and stops it at cleanup,
// failing the test if a process did not stop cleanly (leases revoked, exit 0).
func startFleet(t *testing.T, o fleet.Options) *fleet.Fleet {
	t.Helper()
	o.BinDir = binDir
	o.WorkDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := fleet.Start(ctx, o)
	if err != nil {
		dumpLogs(t, filepath.Join(o.WorkDir, "logs"))
		t.Fatalf("start fleet: %v", err)
	}
	t.Cleanup(func() {
		errs := f.Stop()
		if t.Failed() {
			dumpLogs(t, f.LogDir)
		}
		for _, e := range errs {
			t.Errorf("stop: %v", e)
		}
	})
	return f
}

func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".access.log") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("=== %s (tail)\n%s", e.Name(), b)
	}
}

// eventually polls cond until it returns nil or the timeout passes.
// Each check costs requests to the fleet: every 100ms.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	poll.Every(t, timeout, 100*time.Millisecond, what, cond)
}

// outcome is what one client request got.
type outcome struct {
	Status     int
	Cluster    string
	SubCluster string
	Instance   string
	Reason     string // X-Sluice-Reason on generated responses
	Err        error
}

var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64},
}

func do(method, url string, clientIP string) outcome {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return outcome{Err: err}
	}
	req.Host = "demo.local"
	if clientIP != "" {
		req.Header.Set("X-Forwarded-For", clientIP)
	}
	resp, err := client.Do(req)
	if err != nil {
		return outcome{Err: err}
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return outcome{
		Status: resp.StatusCode, Err: err,
		Cluster:    resp.Header.Get("X-Sluice-Backend-Cluster"),
		SubCluster: resp.Header.Get("X-Sluice-Backend-Subcluster"),
		Instance:   resp.Header.Get("X-Sluice-Backend-Instance"),
		Reason:     resp.Header.Get("X-Sluice-Reason"),
	}
}

// load sends n GETs to url from distinct client IPs (10.x.y.z via a trusted
// X-Forwarded-For), conc at a time, and returns the outcomes.
func load(url string, n, conc int, ipOffset int) []outcome {
	out := make([]outcome, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				k := i + ipOffset
				ip := fmt.Sprintf("10.%d.%d.%d", (k>>16)&255, (k>>8)&255, k&255)
				out[i] = do(http.MethodGet, url, ip)
			}
		}()
	}
	wg.Wait()
	return out
}

// shares counts outcomes per sub-cluster ("BLACKHOLE" for blackholed) and
// returns the percentages and the counts.
func shares(outs []outcome) (map[string]float64, map[string]int) {
	counts := map[string]int{}
	for _, o := range outs {
		switch {
		case o.Err != nil:
			counts["ERROR"]++
		case o.Status == http.StatusOK:
			counts[o.SubCluster]++
		case o.Reason == "blackhole":
			counts["BLACKHOLE"]++
		default:
			counts[fmt.Sprintf("HTTP%d:%s", o.Status, o.Reason)]++
		}
	}
	pct := map[string]float64{}
	for k, v := range counts {
		pct[k] = 100 * float64(v) / float64(len(outs))
	}
	return pct, counts
}

func within(t *testing.T, got map[string]float64, want map[string]float64, tol float64) {
	t.Helper()
	for k, w := range want {
		if g := got[k]; g < w-tol || g > w+tol {
			t.Errorf("share of %s = %.2f%%, want %.0f%% ± %.0f (all: %v)", k, g, w, tol, got)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && g > 0 {
			t.Errorf("unexpected outcome %s: %.2f%% (all: %v)", k, g, got)
		}
	}
}

// backendTotal returns how many requests a demo backend received.
func backendTotal(b *fleet.Backend) (int64, error) {
	resp, err := http.Get("http://" + b.Addr + "/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var s struct {
		Total int64 `json:"requests_total"`
	}
	err = json.NewDecoder(resp.Body).Decode(&s)
	return s.Total, err
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
