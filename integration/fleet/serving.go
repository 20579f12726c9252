package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
)

// waitServing waits until every proxy cluster's live snapshot lists every
// backend as healthy and every proxy applied it, failing early if a process
// exited.
func (f *Fleet) waitServing(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := f.exitedEarly(); err != nil {
			return err
		}
		if last = f.serving(ctx); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet not serving after %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *Fleet) exitedEarly() error {
	check := func(p *Proc) error {
		if p != nil && p.Exited() {
			tail, _ := os.ReadFile(p.Log)
			if len(tail) > 600 {
				tail = tail[len(tail)-600:]
			}
			return fmt.Errorf("%s exited (log %s):\n%s", p.Name, p.Log, tail)
		}
		return nil
	}
	for _, b := range f.Backends {
		if err := errors.Join(check(b.Proc), check(b.Agent)); err != nil {
			return err
		}
	}
	for _, p := range f.Schedulers {
		if err := check(p); err != nil {
			return err
		}
	}
	for _, p := range f.Proxies {
		if err := check(p.Proc); err != nil {
			return err
		}
	}
	return nil
}

// serving reports why the fleet is not fully serving yet (nil when it is).
func (f *Fleet) serving(ctx context.Context) error {
	want := map[string]int{}
	for _, b := range f.Backends {
		want[b.Cluster+"/"+b.SubCluster]++
	}
	pcs := map[string]bool{}
	for _, p := range f.Proxies {
		pcs[p.ProxyCluster] = true
	}
	for pc := range pcs {
		ptr, err := f.Current(ctx, pc)
		if err != nil {
			return err
		}
		s, err := f.Snapshot(ctx, pc, ptr.Version)
		if err != nil {
			return err
		}
		for key, n := range want {
			cluster, sub, _ := strings.Cut(key, "/")
			got := 0
			for _, in := range s.Clusters[cluster].SubClusters[sub].Instances {
				if in.Weight > 0 && (in.State == "" || in.State == config.StateHealthy) {
					got++
				}
			}
			if got != n {
				return fmt.Errorf("%s v%d: %s has %d of %d backends healthy", pc, ptr.Version, key, got, n)
			}
		}
		for _, p := range f.ProxiesOf(pc) {
			var st struct {
				AppliedLineage string `json:"applied_lineage"`
				AppliedVersion uint64 `json:"applied_version"`
			}
			if err := getJSON(ctx, p.AdminURL+"/v1/status", &st); err != nil {
				return err
			}
			if st.AppliedVersion != ptr.Version || st.AppliedLineage != ptr.Lineage {
				return fmt.Errorf("%s applied v%d of lineage %s; the pointer names v%d of lineage %s", p.ID,
					st.AppliedVersion, snapshot.LineageName(st.AppliedLineage), ptr.Version, snapshot.LineageName(ptr.Lineage))
			}
		}
	}
	return nil
}

// Snapshot reads and decodes one published snapshot of a proxy cluster.
func (f *Fleet) Snapshot(ctx context.Context, pc string, version uint64) (*snapshot.Snapshot, error) {
	m, found, err := snapio.Manifest(ctx, f.Client, f.Layout, pc, version)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("snapshot %s v%d missing", pc, version)
	}
	return snapshot.DecodeBatch(m, snapio.PartsBatch(ctx, f.Client, f.Layout))
}

func getJSON(ctx context.Context, url string, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
