package configwatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapio"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// fetch reads, decodes and validates the snapshot p points to. The
// manifest is the one push carries when it is p's version (the watch event
// brought it), else it is read from etcd. Parts the watcher already holds
// (w.held: those of the applied snapshot, by digest) or that push carries
// are not read; the others are read in one transaction per round of
// snapshot.DecodeBatch. parts is every part of the new snapshot, which
// becomes w.held once it is applied. Every part's digest is checked
// whether it was read, pushed or held.
func (w *Watcher) fetch(ctx context.Context, p snapshot.Pointer, push *snapshot.Push) (checked validate.Checked, held heldParts, err error) {
	m, source, err := w.manifest(ctx, p, push)
	if err != nil {
		return validate.Checked{}, heldParts{}, err
	}
	if m.Meta.ProxyCluster != w.cfg.ProxyCluster || m.Meta.Version != p.Version || m.Meta.Hash != p.Hash || m.Meta.Lineage != p.Lineage {
		want := snapshot.Meta{ProxyCluster: w.cfg.ProxyCluster, Lineage: p.Lineage, Version: p.Version}
		return validate.Checked{}, heldParts{}, fmt.Errorf("manifest %s is %s hash %s; pointer says %s hash %s", source,
			m.Meta.ID(), m.Meta.Hash, want.ID(), p.Hash)
	}
	held.parts = map[string][]byte{}
	s, decoded, err := snapshot.DecodeReusing(m, w.partsGetter(ctx, push, held.parts), w.held.decoded)
	var ee etcdError
	if errors.As(err, &ee) {
		return validate.Checked{}, heldParts{}, ee
	}
	if errors.Is(err, snapshot.ErrMissingPart) {
		// A pushed manifest is there even when history trimming removed
		// the version (a pointer seen late, on a watch replay): its parts
		// may be collected. Skip it, as a missing manifest, if the pointer
		// has moved on.
		if moved, serr := w.superseded(ctx, p); serr != nil {
			return validate.Checked{}, heldParts{}, serr
		} else if moved {
			return validate.Checked{}, heldParts{}, errSuperseded
		}
	}
	if err != nil {
		return validate.Checked{}, heldParts{}, err
	}
	checked, err = validate.Check(s)
	if err != nil {
		return validate.Checked{}, heldParts{}, fmt.Errorf("invalid snapshot: %w", err)
	}
	held.decoded = decoded
	return checked, held, nil
}

// manifest is the manifest of p: push's when it is p's version, else the
// stored one. source names it in errors.
func (w *Watcher) manifest(ctx context.Context, p snapshot.Pointer, push *snapshot.Push) (m snapshot.Manifest, source string, err error) {
	if m, ok := push.ManifestFor(p); ok {
		w.manifestsPushed.Add(1)
		return m, "pushed with pointer " + w.currentKey, nil
	}
	mkey, err := w.cfg.Layout.Snapshot(w.cfg.ProxyCluster, p.Version)
	if err != nil {
		return snapshot.Manifest{}, "", err
	}
	raw, found, err := w.get(ctx, mkey)
	w.snapshotReads.Add(1)
	if err != nil {
		return snapshot.Manifest{}, "", err
	}
	if !found {
		// History trimming may remove the manifest of a pointer we only see
		// late (watch replay); skip it if the pointer has moved on.
		if moved, err := w.superseded(ctx, p); err != nil {
			return snapshot.Manifest{}, "", err
		} else if moved {
			return snapshot.Manifest{}, "", errSuperseded
		}
		return snapshot.Manifest{}, "", fmt.Errorf("manifest %s is missing", mkey)
	}
	if err := codec.UnmarshalJSON(raw, &m); err != nil {
		return snapshot.Manifest{}, "", fmt.Errorf("manifest %s: %w", mkey, err)
	}
	return m, mkey, nil
}

// superseded reports whether the pointer in etcd now names another
// snapshot for this proxy than p.
func (w *Watcher) superseded(ctx context.Context, p snapshot.Pointer) (bool, error) {
	cur, found, err := w.get(ctx, w.currentKey)
	if err != nil || !found {
		return false, err
	}
	var now snapshot.Pointer
	return codec.UnmarshalJSON(cur, &now) == nil && now.For(w.cfg.ID) != p, nil
}

// heldParts is what a watcher keeps of the applied snapshot so that the
// next fetch reads and decodes only what changed: its parts by digest
// (head and buckets; cluster parts unless decoded holds them) and its
// decoded clusters (snapshot.DecodeReusing).
type heldParts struct {
	parts   map[string][]byte
	decoded *snapshot.Decoded
}

// partsGetter answers from w.held and push and reads the rest from etcd
// (each call one or a few transactions, under one OpTimeout); it records
// every part it returns in used.
func (w *Watcher) partsGetter(ctx context.Context, push *snapshot.Push, used map[string][]byte) snapshot.GetMany {
	return func(ds []string) ([][]byte, error) {
		out := make([][]byte, len(ds))
		var miss []string
		got := map[string][]byte{}
		for _, d := range ds {
			if _, ok := w.held.parts[d]; ok || push.Part(d) != nil {
				continue
			}
			if _, ok := got[d]; !ok {
				got[d] = nil
				miss = append(miss, d)
			}
		}
		if len(miss) > 0 {
			octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
			bs, err := snapio.PartsBatch(octx, w.cfg.Client, w.cfg.Layout)(miss)
			cancel()
			if err != nil {
				return nil, etcdError{err}
			}
			for j, b := range bs {
				got[miss[j]] = b
			}
			w.partsRead.Add(uint64(len(miss)))
			w.snapshotReads.Add(uint64((len(miss) + snapio.MaxGetsPerTxn - 1) / snapio.MaxGetsPerTxn))
		}
		for i, d := range ds {
			b, ok := w.held.parts[d]
			if !ok {
				b = push.Part(d)
			}
			if b == nil {
				b = got[d]
			}
			if b != nil {
				out[i], used[d] = b, b
			}
		}
		return out, nil
	}
}

func (w *Watcher) get(ctx context.Context, key string) ([]byte, bool, error) {
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpTimeout)
	defer cancel()
	resp, err := w.cfg.Client.Get(octx, key)
	if err != nil {
		return nil, false, etcdError{fmt.Errorf("get %s: %w", key, err)}
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}
