package plan

import (
	"crypto/sha256"
	"encoding/json"
	"hash"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// clusterSums returns snapshot.ClusterHash of every entry of rows, which
// share their sub-clusters and policy and differ only by row: the shared
// prefix is encoded and hashed once, and the hash state cloned per row. It
// relies on encoding/json's layout of snapshot.Cluster (subclusters,
// policy, row; explanation omitted when nil); TestClusterSumsMatch and
// every planner test compare the result with snapshot.ContentHash.
func clusterSums(subs map[string]config.SubCluster, pol *config.Policy, rows []snapshot.Cluster) [][sha256.Size]byte {
	p := []byte(`{"subclusters":`)
	p = append(p, mustJSON(subs)...)
	p = append(p, `,"policy":`...)
	p = append(p, mustJSON(pol)...)
	p = append(p, `,"row":`...)
	base := sha256.New()
	base.Write(p)
	sums := make([][sha256.Size]byte, len(rows))
	buf := make([]byte, 0, 256)
	for b := range rows {
		h, err := base.(hash.Cloner).Clone()
		if err != nil {
			panic("plan: clone sha256: " + err.Error()) // crypto/sha256 always clones
		}
		buf = appendJSON(buf[:0], &rows[b].Row)
		buf = append(buf, '}')
		h.Write(buf)
		h.Sum(sums[b][:0])
	}
	return sums
}

func appendJSON(dst []byte, v any) []byte { return append(dst, mustJSON(v)...) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Snapshots hold plain values only; Marshal cannot fail.
		panic("plan: encode snapshot: " + err.Error())
	}
	return b
}
