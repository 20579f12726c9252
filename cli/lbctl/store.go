package lbctl

import (
	"context"
	"errors"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/stateio"
)

// store is the desired state and the shift intents in etcd (api/stateio,
// which the dashboard writes through too).
func (e *env) store() (stateio.Store, error) {
	cli, err := e.etcd()
	if err != nil {
		return stateio.Store{}, err
	}
	return stateio.Store{KV: cli, Layout: e.layout}, nil
}

// readState reads the desired state (Revision 0: none is stored).
func (e *env) readState(ctx context.Context) (stateio.Stored, error) {
	s, err := e.store()
	if err != nil {
		return stateio.Stored{}, err
	}
	return s.Read(ctx)
}

// storedState is readState for commands that need a stored state.
func (e *env) storedState(ctx context.Context) (stateio.Stored, error) {
	s, err := e.store()
	if err != nil {
		return stateio.Stored{}, err
	}
	return s.ReadStored(ctx)
}

// stateWrite is how lbctl writes the desired state: marked urgent with
// --urgent (any other write clears the mark), refused when the scheduler
// could not publish it (checkPlan).
func (e *env) stateWrite() stateio.Write {
	w := stateio.Write{Check: func(ctx context.Context, next *config.State) error { return e.checkPlan(ctx, next, e.what()) }}
	if e.c != nil && e.c.Bool("urgent") {
		w.Urgent = &config.Urgent{Author: e.author(), What: e.c.Command.HelpName}
	}
	return w
}

// writeState validates s, refuses it when the scheduler could not publish
// it, and writes it only if the key's revision is still rev (0: only if it
// does not exist). It returns the new revision.
func (e *env) writeState(ctx context.Context, s *config.State, rev int64) (int64, error) {
	st, err := e.store()
	if err != nil {
		return 0, err
	}
	rev, err = st.Put(ctx, s, rev, e.stateWrite())
	return rev, conflictCode(err)
}

// updateState applies mutate to the stored state and writes it with CAS. A
// concurrent edit re-reads and re-applies mutate (a targeted edit such as a
// pin never loses the other writer's update), at most a few times.
func (e *env) updateState(mutate func(*config.State) error) (int64, error) {
	st, err := e.store()
	if err != nil {
		return 0, err
	}
	w := e.stateWrite()
	w.AttemptTimeout = e.timeout // --timeout bounds each attempt
	rev, err := st.Update(e.baseCtx(), mutate, w)
	return rev, conflictCode(err)
}

// conflictCode gives a write that found its key changed exit 3.
func conflictCode(err error) error {
	if errors.Is(err, stateio.ErrConflict) {
		return withCode(ExitConflict, err)
	}
	return err
}

// pointers returns current/<pc> for every proxy cluster.
func (e *env) pointers(ctx context.Context) (map[string]snapshot.Pointer, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	r, err := cli.Get(ctx, e.layout.CurrentPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read snapshot pointers: %w", err)
	}
	out := map[string]snapshot.Pointer{}
	for _, kv := range r.Kvs {
		pc, err := e.layout.ParseCurrent(string(kv.Key))
		if err != nil {
			continue
		}
		var p snapshot.Pointer
		if err := codec.UnmarshalJSON(kv.Value, &p); err != nil {
			return nil, fmt.Errorf("pointer %s: %w", kv.Key, err)
		}
		out[pc] = p
	}
	return out, nil
}

// manifest reads one snapshot's manifest.
func (e *env) manifest(ctx context.Context, pc string, v uint64) (snapshot.Manifest, error) {
	cli, err := e.etcd()
	if err != nil {
		return snapshot.Manifest{}, err
	}
	m, found, err := snapio.Manifest(ctx, cli, e.layout, pc, v)
	if err == nil && !found {
		err = fmt.Errorf("snapshot %s v%d does not exist (history may have been trimmed)", pc, v)
	}
	return m, err
}

// snapshot reads and decodes one snapshot.
func (e *env) snapshot(ctx context.Context, pc string, v uint64) (*snapshot.Snapshot, error) {
	m, err := e.manifest(ctx, pc, v)
	if err != nil {
		return nil, err
	}
	return snapshot.DecodeBatch(m, snapio.PartsBatch(ctx, e.client, e.layout))
}

// liveSnapshots returns the snapshot current/<pc> points to for each proxy
// cluster (only pc when it is not empty).
func (e *env) liveSnapshots(ctx context.Context, only string) (map[string]*snapshot.Snapshot, error) {
	ptrs, err := e.pointers(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]*snapshot.Snapshot{}
	for pc, p := range ptrs {
		if only != "" && pc != only {
			continue
		}
		s, err := e.snapshot(ctx, pc, p.Version)
		if err != nil {
			return nil, fmt.Errorf("live snapshot of %s: %w", pc, err)
		}
		out[pc] = s
	}
	if only != "" && out[only] == nil {
		return nil, fmt.Errorf("no snapshot has been published for proxy cluster %q", only)
	}
	return out, nil
}

// history lists the manifests kept for a proxy cluster, oldest first.
func (e *env) history(ctx context.Context, pc string) ([]snapshot.Manifest, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	prefix, err := e.layout.SnapshotPrefix(pc)
	if err != nil {
		return nil, err
	}
	r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	var out []snapshot.Manifest
	for _, kv := range r.Kvs {
		var m snapshot.Manifest
		if err := codec.UnmarshalJSON(kv.Value, &m); err != nil {
			continue
		}
		m.Inline = nil
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta.Version < out[j].Meta.Version })
	return out, nil
}

// proxyStatuses returns every live proxy's status (one proxy cluster if pc).
func (e *env) proxyStatuses(ctx context.Context, pc string) ([]report.ProxyStatus, error) {
	prefix, err := e.layout.StatusPrefix(pc)
	if err != nil {
		return nil, err
	}
	out, err := e.statusesUnder(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("read proxy status: %w", err)
	}
	return out, nil
}

// instances returns every agent registration (one cluster if cluster != "").
func (e *env) instances(ctx context.Context, cluster string) ([]report.Instance, error) {
	cli, err := e.etcd()
	if err != nil {
		return nil, err
	}
	r, err := cli.Get(ctx, e.layout.InstancesPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read instances: %w", err)
	}
	var out []report.Instance
	for _, kv := range r.Kvs {
		var in report.Instance
		if err := codec.UnmarshalJSON(kv.Value, &in); err != nil {
			continue
		}
		if cluster == "" || in.Cluster == cluster {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.SubCluster != b.SubCluster {
			return a.SubCluster < b.SubCluster
		}
		return fmt.Sprintf("%s:%05d", a.Addr, a.Port) < fmt.Sprintf("%s:%05d", b.Addr, b.Port)
	})
	return out, nil
}
