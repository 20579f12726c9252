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

// fetch reads, decodes and validates the snapshot p points to. Parts the
// watcher already holds (w.parts: those of the applied snapshot, by digest)
// are not read again; the others are read in one transaction per round of
// snapshot.DecodeBatch. parts is every part of the new snapshot, which
// becomes w.parts once it is applied. Every part's digest is checked
// whether it was read or held.
func (w *Watcher) fetch(ctx context.Context, p snapshot.Pointer) (checked validate.Checked, parts map[string][]byte, err error) {
	mkey, err := w.cfg.Layout.Snapshot(w.cfg.ProxyCluster, p.Version)
	if err != nil {
		return validate.Checked{}, nil, err
	}
	raw, found, err := w.get(ctx, mkey)
	if err != nil {
		return validate.Checked{}, nil, err
	}
	if !found {
		// History trimming may remove the manifest of a pointer we only see
		// late (watch replay); skip it if the pointer has moved on.
		if cur, found, err := w.get(ctx, w.currentKey); err != nil {
			return validate.Checked{}, nil, err
		} else if found {
			var now snapshot.Pointer
			if codec.UnmarshalJSON(cur, &now) == nil && now.For(w.cfg.ID) != p {
				return validate.Checked{}, nil, errSuperseded
			}
		}
		return validate.Checked{}, nil, fmt.Errorf("manifest %s is missing", mkey)
	}
	var m snapshot.Manifest
	if err := codec.UnmarshalJSON(raw, &m); err != nil {
		return validate.Checked{}, nil, fmt.Errorf("manifest %s: %w", mkey, err)
	}
	if m.Meta.ProxyCluster != w.cfg.ProxyCluster || m.Meta.Version != p.Version || m.Meta.Hash != p.Hash || m.Meta.Lineage != p.Lineage {
		want := snapshot.Meta{ProxyCluster: w.cfg.ProxyCluster, Lineage: p.Lineage, Version: p.Version}
		return validate.Checked{}, nil, fmt.Errorf("manifest %s is %s hash %s; pointer says %s hash %s", mkey,
			m.Meta.ID(), m.Meta.Hash, want.ID(), p.Hash)
	}
	parts = map[string][]byte{}
	s, err := snapshot.DecodeBatch(m, w.partsGetter(ctx, parts))
	var ee etcdError
	if errors.As(err, &ee) {
		return validate.Checked{}, nil, ee
	}
	if err != nil {
		return validate.Checked{}, nil, err
	}
	checked, err = validate.Check(s)
	if err != nil {
		return validate.Checked{}, nil, fmt.Errorf("invalid snapshot: %w", err)
	}
	return checked, parts, nil
}

// partsGetter answers from w.parts and reads the rest from etcd (each call
// one or a few transactions, under one OpTimeout); it records every part
// it returns in used.
func (w *Watcher) partsGetter(ctx context.Context, used map[string][]byte) snapshot.GetMany {
	return func(ds []string) ([][]byte, error) {
		out := make([][]byte, len(ds))
		var miss []string
		got := map[string][]byte{}
		for _, d := range ds {
			if _, ok := w.parts[d]; ok {
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
		}
		for i, d := range ds {
			b, ok := w.parts[d]
			if !ok {
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
