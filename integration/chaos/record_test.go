//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// VersionSample is one poll of a proxy's admin /v1/status.
type VersionSample struct {
	T       time.Time `json:"t"`
	Proxy   string    `json:"proxy"`
	Applied uint64    `json:"applied"`
	Source  string    `json:"source,omitempty"`
	Etcd    *bool     `json:"etcd_connected,omitempty"`
	Err     string    `json:"err,omitempty"`
}

// Versions polls every proxy's applied version every 250 ms.
type Versions struct {
	env     *Env
	mu      sync.Mutex
	samples []VersionSample
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func recordVersions(env *Env) *Versions {
	ctx, cancel := context.WithCancel(context.Background())
	v := &Versions{env: env, cancel: cancel}
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range proxies {
				c, cc := context.WithTimeout(ctx, time.Second)
				st, err := env.proxyStatus(c, p)
				cc()
				s := VersionSample{T: time.Now(), Proxy: p.ID, Applied: st.AppliedVersion, Source: st.Source, Etcd: st.EtcdConnected}
				if err != nil {
					s.Err = err.Error()
				}
				v.mu.Lock()
				v.samples = append(v.samples, s)
				v.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return v
}

// Stop ends polling, writes <dir>/versions.jsonl and returns the samples.
func (v *Versions) Stop(dir string) ([]VersionSample, error) {
	v.cancel()
	v.wg.Wait()
	v.mu.Lock()
	defer v.mu.Unlock()
	f, err := os.Create(filepath.Join(dir, "versions.jsonl"))
	if err != nil {
		return v.samples, err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	for _, s := range v.samples {
		if err := enc.Encode(s); err != nil {
			return v.samples, err
		}
	}
	return v.samples, bw.Flush()
}

// monotonic checks I1 on the samples: per proxy, the applied version never
// goes down (samples of a proxy that was not answering are skipped; a
// restarted proxy must come back at or above what it had applied).
func monotonic(samples []VersionSample) (checked int, err error) {
	last := map[string]uint64{}
	for _, s := range samples {
		if s.Err != "" || s.Applied == 0 {
			continue
		}
		checked++
		if s.Applied < last[s.Proxy] {
			return checked, fmt.Errorf("I1: %s applied v%d after v%d at %s", s.Proxy, s.Applied, last[s.Proxy], s.T.Format(time.RFC3339Nano))
		}
		last[s.Proxy] = s.Applied
	}
	return checked, nil
}

// BackendStats is a demo backend's GET /stats.
type BackendStats struct {
	Instance      string           `json:"instance"`
	RequestsTotal int64            `json:"requests_total"`
	ByPath        map[string]int64 `json:"by_path"`
}

// backendStats reads /stats of every backend that answers, writes them to
// <dir>/backends.json and returns them by container name.
func backendStats(env *Env, dir string) (map[string]BackendStats, error) {
	out := map[string]BackendStats{}
	for _, b := range backends {
		req, _ := http.NewRequest(http.MethodGet, b.Stats, nil)
		resp, err := env.http.Do(req)
		if err != nil {
			continue
		}
		var st BackendStats
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s stats: %w", b.Name, err)
		}
		out[b.Name] = st
	}
	raw, _ := json.MarshalIndent(out, "", " ")
	return out, os.WriteFile(filepath.Join(dir, "backends.json"), raw, 0o644)
}

// blackholeLeaks checks D1: no request the client saw dropped by the
// blackhole share appears in any backend's received paths.
func blackholeLeaks(outs []Outcome, stats map[string]BackendStats) (blackholed, leaked int) {
	seen := map[string]bool{}
	for _, st := range stats {
		for p := range st.ByPath {
			seen[p] = true
		}
	}
	for _, o := range outs {
		if o.Kind() == "blackhole" {
			blackholed++
			if seen[o.Path] {
				leaked++
			}
		}
	}
	return blackholed, leaked
}

// Resources is a proxy's goroutine and open-file counts (its /metrics).
type Resources struct{ Goroutines, FDs int }

func (e *Env) resources(p Proxy) (Resources, error) {
	body, err := e.admin(p, "/metrics")
	if err != nil {
		return Resources{}, err
	}
	var r Resources
	for _, line := range strings.Split(body, "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, "go_goroutines %g", &v); err == nil {
			r.Goroutines = int(v)
		}
		if _, err := fmt.Sscanf(line, "process_open_fds %g", &v); err == nil {
			r.FDs = int(v)
		}
	}
	if r.Goroutines == 0 || r.FDs == 0 {
		return r, fmt.Errorf("%s /metrics: no go_goroutines or process_open_fds", p.ID)
	}
	return r, nil
}

// metricSeries reads every series of one metric family from a proxy's
// /metrics: label text (e.g. `reason="stall"`, "" without labels) -> value.
// A counter vector has no series for a label value never counted, so a
// missing key reads as 0.
func (e *Env) metricSeries(p Proxy, name string) (map[string]float64, error) {
	body, err := e.admin(p, "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return nil, fmt.Errorf("%s /metrics: malformed line %q", p.ID, line)
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%g", &v); err != nil {
			return nil, fmt.Errorf("%s /metrics: line %q: %w", p.ID, line, err)
		}
		out[labels] = v
	}
	return out, nil
}

// Watch restart reasons of sluice_proxy_watch_restarts_total
// (proxy/internal/configwatch).
var restartReasons = []string{"compacted", "closed", "watch_error", "stall", "sync_error"}

// watchRestarts reads a proxy's snapshot-watch restarts by reason.
func (e *Env) watchRestarts(p Proxy) (map[string]int, error) {
	s, err := e.metricSeries(p, "sluice_proxy_watch_restarts_total")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, r := range restartReasons {
		out[r] = int(s[`reason="`+r+`"`])
	}
	return out, nil
}

// restartDelta is after-before per reason, formatted "stall +1, sync_error +3"
// (reasons that did not move are left out; "none" when nothing moved).
func restartDelta(before, after map[string]int) (map[string]int, string) {
	d := map[string]int{}
	var parts []string
	for _, r := range restartReasons {
		if n := after[r] - before[r]; n != 0 {
			d[r] = n
			parts = append(parts, fmt.Sprintf("%s %+d", r, n))
		}
	}
	if len(parts) == 0 {
		return d, "none"
	}
	return d, strings.Join(parts, ", ")
}
