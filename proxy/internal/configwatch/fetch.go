package configwatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// fetch reads, decodes and validates the snapshot p points to.
func (w *Watcher) fetch(ctx context.Context, p snapshot.Pointer) (validate.Checked, error) {
	mkey, err := w.cfg.Layout.Snapshot(w.cfg.ProxyCluster, p.Version)
	if err != nil {
		return validate.Checked{}, err
	}
	raw, found, err := w.get(ctx, mkey)
	if err != nil {
		return validate.Checked{}, err
	}
	if !found {
		// History trimming may remove the manifest of a pointer we only see
		// late (watch replay); skip it if the pointer has moved on.
		if cur, found, err := w.get(ctx, w.currentKey); err != nil {
			return validate.Checked{}, err
		} else if found {
			var now snapshot.Pointer
			if codec.UnmarshalJSON(cur, &now) == nil && now.For(w.cfg.ID) != p {
				return validate.Checked{}, errSuperseded
			}
		}
		return validate.Checked{}, fmt.Errorf("manifest %s is missing", mkey)
	}
	var m snapshot.Manifest
	if err := codec.UnmarshalJSON(raw, &m); err != nil {
		return validate.Checked{}, fmt.Errorf("manifest %s: %w", mkey, err)
	}
	if m.Meta.ProxyCluster != w.cfg.ProxyCluster || m.Meta.Version != p.Version || m.Meta.Hash != p.Hash || m.Meta.Lineage != p.Lineage {
		want := snapshot.Meta{ProxyCluster: w.cfg.ProxyCluster, Lineage: p.Lineage, Version: p.Version}
		return validate.Checked{}, fmt.Errorf("manifest %s is %s hash %s; pointer says %s hash %s", mkey,
			m.Meta.ID(), m.Meta.Hash, want.ID(), p.Hash)
	}
	s, err := snapshot.Decode(m, func(digest string) ([]byte, error) {
		pkey, err := w.cfg.Layout.Part(digest)
		if err != nil {
			return nil, err
		}
		b, found, err := w.get(ctx, pkey)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("%s: %w", pkey, snapshot.ErrMissingPart)
		}
		return b, nil
	})
	var ee etcdError
	if errors.As(err, &ee) {
		return validate.Checked{}, ee
	}
	if err != nil {
		return validate.Checked{}, err
	}
	checked, err := validate.Check(s)
	if err != nil {
		return validate.Checked{}, fmt.Errorf("invalid snapshot: %w", err)
	}
	return checked, nil
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
