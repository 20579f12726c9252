package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/sluicelb/sluice/api/snapshot"
)

// contentHash equals snapshot.ContentHash(s) but reuses each cluster's
// encoded sub-clusters and policy (shared by every proxy cluster and cached
// with the cluster's plan), so a plan encodes each cluster once instead of
// once per proxy cluster. It relies on encoding/json's layout of
// snapshot.Snapshot (clusters is its last field, omitted when empty) and of
// snapshot.Cluster (subclusters, policy, row; explanation omitted when nil);
// TestContentHashMatches and every planner test compare it with
// snapshot.ContentHash.
// rowsReplaced says hysteresis swapped in previous rows, so the cached row
// encodings may not apply.
func contentHash(s *snapshot.Snapshot, names []string, outs map[string]clusterOutput, rowsReplaced bool) string {
	head := snapshot.Snapshot{
		Meta:           snapshot.Meta{ProxyCluster: s.Meta.ProxyCluster},
		Settings:       s.Settings,
		Products:       s.Products,
		DefaultProduct: s.DefaultProduct,
	}
	b := mustJSON(&head)
	h := sha256.New()
	if len(names) == 0 {
		h.Write(b)
		return hex.EncodeToString(h.Sum(nil))
	}
	h.Write(b[:len(b)-1])
	h.Write([]byte(`,"clusters":{`))
	for i, name := range names {
		if i > 0 {
			h.Write([]byte(","))
		}
		h.Write(mustJSON(name))
		h.Write([]byte(":"))
		out := outs[name]
		h.Write(out.prefix)
		c := s.Clusters[name]
		if enc, ok := out.rowJSON[s.Meta.ProxyCluster]; ok && (!rowsReplaced || sameRow(out.rows[s.Meta.ProxyCluster].Row, c.Row)) {
			h.Write(enc)
		} else {
			h.Write(mustJSON(&c.Row))
		}
		h.Write([]byte("}"))
	}
	h.Write([]byte("}}"))
	return hex.EncodeToString(h.Sum(nil))
}

// encodeCluster fills out.prefix and out.rowJSON for contentHash.
func encodeCluster(out *clusterOutput, c snapshot.Cluster) {
	p := []byte(`{"subclusters":`)
	p = append(p, mustJSON(c.SubClusters)...)
	p = append(p, `,"policy":`...)
	p = append(p, mustJSON(&c.Policy)...)
	p = append(p, `,"row":`...)
	out.prefix = p
	out.rowJSON = make(map[string][]byte, len(out.rows))
	for pc, r := range out.rows {
		out.rowJSON[pc] = mustJSON(&r.Row)
	}
}

// sameRow reports whether two rows are the same value (hysteresis may have
// swapped in the previous row).
func sameRow(a, b snapshot.Row) bool {
	if a.Denominator != b.Denominator || a.Pinned != b.Pinned || a.AllowFullDrop != b.AllowFullDrop || len(a.Weights) != len(b.Weights) {
		return false
	}
	for k, v := range a.Weights {
		if w, ok := b.Weights[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Snapshots hold plain values only; Marshal cannot fail.
		panic("plan: encode snapshot: " + err.Error())
	}
	return b
}
