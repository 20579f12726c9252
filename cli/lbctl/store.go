package lbctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
)

// errConflict is returned when the stored desired state changed between
// read and write.
var errConflict = errors.New("conflict")

// storedState is the desired state with the etcd revision it was read at.
type storedState struct {
	State    config.State
	Revision int64 // ModRevision of the key; 0 when absent
	Raw      []byte
}

func (e *env) readState(ctx context.Context) (storedState, error) {
	cli, err := e.etcd()
	if err != nil {
		return storedState{}, err
	}
	r, err := cli.Get(ctx, e.layout.Desired())
	if err != nil {
		return storedState{}, fmt.Errorf("read desired state: %w", err)
	}
	if len(r.Kvs) == 0 {
		return storedState{}, nil
	}
	var s config.State
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &s); err != nil {
		return storedState{}, fmt.Errorf("stored desired state at %s is not valid: %w", e.layout.Desired(), err)
	}
	return storedState{State: s, Revision: r.Kvs[0].ModRevision, Raw: r.Kvs[0].Value}, nil
}

// storedState is readState for commands that need a stored state.
func (e *env) storedState(ctx context.Context) (storedState, error) {
	st, err := e.readState(ctx)
	if err == nil && st.Revision == 0 {
		err = fmt.Errorf("no desired state stored at %s: write one with lbctl apply -f FILE", e.layout.Desired())
	}
	return st, err
}

// writeState validates s, refuses it when the scheduler could not publish
// it (checkPlan), and writes it only if the key's revision is still rev (0:
// only if it does not exist). It returns the new revision. The write is
// marked urgent with --urgent; any other write clears the mark.
func (e *env) writeState(ctx context.Context, s *config.State, rev int64) (int64, error) {
	s.Urgent = nil
	if e.c != nil && e.c.Bool("urgent") {
		s.Urgent = &config.Urgent{Author: e.author(), What: e.c.Command.HelpName}
	}
	if err := edit.Check(s); err != nil {
		return 0, err
	}
	if err := e.checkPlan(ctx, s, e.what()); err != nil {
		return 0, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return 0, err
	}
	cli, err := e.etcd()
	if err != nil {
		return 0, err
	}
	k := e.layout.Desired()
	r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("write desired state: %w", err)
	}
	if !r.Succeeded {
		return 0, withCode(ExitConflict, fmt.Errorf("%w: the desired state changed since revision %d (someone else wrote it); nothing was written — re-run to apply on top of the new state", errConflict, rev))
	}
	return r.Header.Revision, nil
}

// updateState applies mutate to the stored state and writes it with CAS. A
// concurrent edit re-reads and re-applies mutate (a targeted edit such as a
// pin never loses the other writer's update), at most a few times.
func (e *env) updateState(mutate func(*config.State) error) (int64, error) {
	for attempt := 0; attempt < 5; attempt++ {
		ctx, cancel := e.ctx()
		st, err := e.storedState(ctx)
		if err != nil {
			cancel()
			return 0, err
		}
		if err := mutate(&st.State); err != nil {
			cancel()
			return 0, err
		}
		if err := edit.CheckEdit(&st.State); err != nil {
			cancel()
			return 0, err
		}
		rev, err := e.writeState(ctx, &st.State, st.Revision)
		cancel()
		if errors.Is(err, errConflict) {
			continue
		}
		return rev, err
	}
	return 0, withCode(ExitConflict, fmt.Errorf("%w: the desired state kept changing; nothing was written", errConflict))
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
