//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/integration/fleet"
)

// liveSnapshot reads and decodes the snapshot current/<pc> points to.
func liveSnapshot(ctx context.Context, f *fleet.Fleet, pc string) (*snapshot.Snapshot, error) {
	ptr, err := f.Current(ctx, pc)
	if err != nil {
		return nil, err
	}
	return f.Snapshot(ctx, pc, ptr.Version)
}

// available counts the instances of a sub-cluster that take traffic.
func available(sc config.SubCluster) int {
	n := 0
	for _, in := range sc.Instances {
		if in.Weight > 0 && (in.State == "" || in.State == config.StateHealthy) {
			n++
		}
	}
	return n
}

// waitInstances waits until pc's live snapshot has want available instances
// per sub-cluster of cluster.
func waitInstances(t *testing.T, f *fleet.Fleet, pc, cluster string, want map[string]int) *snapshot.Snapshot {
	t.Helper()
	var s *snapshot.Snapshot
	eventually(t, 60*time.Second, fmt.Sprintf("%s snapshot has %v available in %s", pc, want, cluster), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if s, err = liveSnapshot(ctx, f, pc); err != nil {
			return err
		}
		cl, ok := s.Clusters[cluster]
		if !ok {
			return fmt.Errorf("v%d has no cluster %s", s.Meta.Version, cluster)
		}
		for sub, n := range want {
			if got := available(cl.SubClusters[sub]); got != n {
				return fmt.Errorf("v%d: %s/%s has %d available", s.Meta.Version, cluster, sub, got)
			}
		}
		return nil
	})
	return s
}

// waitApplied waits until every live proxy of pc reports (status key) the
// live version, and returns it.
func waitApplied(t *testing.T, f *fleet.Fleet, pc string, timeout time.Duration) uint64 {
	t.Helper()
	var v uint64
	eventually(t, timeout, pc+" proxies applied the live version", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ptr, err := f.Current(ctx, pc)
		if err != nil {
			return err
		}
		v = ptr.Version
		sts, err := statuses(ctx, f, pc)
		if err != nil {
			return err
		}
		for _, p := range f.ProxiesOf(pc) {
			if p.Exited() {
				continue
			}
			st, ok := sts[p.ID]
			if !ok {
				return fmt.Errorf("no status for %s", p.ID)
			}
			if st.AppliedVersion != v {
				return fmt.Errorf("%s applied v%d, live is v%d", p.ID, st.AppliedVersion, v)
			}
		}
		return nil
	})
	return v
}

func statuses(ctx context.Context, f *fleet.Fleet, pc string) (map[string]report.ProxyStatus, error) {
	prefix, err := f.Layout.StatusPrefix(pc)
	if err != nil {
		return nil, err
	}
	r, err := f.Client.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]report.ProxyStatus{}
	for _, kv := range r.Kvs {
		var st report.ProxyStatus
		if err := json.Unmarshal(kv.Value, &st); err != nil {
			return nil, err
		}
		out[st.ID] = st
	}
	return out, nil
}

// drainByHand adds a drain to the desired state straight in etcd, as
// etcdctl would, bypassing lbctl's checks.
func drainByHand(t *testing.T, ctx context.Context, f *fleet.Fleet, cluster, subcluster, reason string) {
	t.Helper()
	r, err := f.Client.Get(ctx, f.Layout.Desired())
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("read the desired state: %v", err)
	}
	var st map[string]any
	if err := json.Unmarshal(r.Kvs[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	drains, _ := st["drains"].([]any)
	st["drains"] = append(drains, map[string]any{"cluster": cluster, "subcluster": subcluster, "reason": reason})
	raw, _ := json.Marshal(st)
	if _, err := f.Client.Put(ctx, f.Layout.Desired(), string(raw)); err != nil {
		t.Fatal(err)
	}
}
