package etcdwatch

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapshot"
)

// store is which etcd a round listed: its cluster id, its lineage record
// ("" none yet), and the highest revision seen from it since. A fresh etcd
// on the same address and configuration has the same cluster id, the same
// revisions for the same first writes, and may pass the old revision within
// seconds; its lineage record (absent, then minted anew with another id) is
// what tells it apart.
type store struct {
	cluster uint64
	lineage atomic.Pointer[string] // nil or "": none known yet
	seen    atomic.Int64

	// lag is the last response explained as behind (see judge) and when a
	// quorum read confirmed that.
	lagMu  sync.Mutex
	lagRev int64
	lagAt  time.Time
}

func newStore(cluster uint64, rev int64, lineage string) *store {
	id := &store{cluster: cluster}
	id.seen.Store(rev)
	id.learnLineage(lineage)
	return id
}

func (id *store) knownLineage() string {
	if p := id.lineage.Load(); p != nil {
		return *p
	}
	return ""
}

// learnLineage records the store's lineage id if none is known yet.
func (id *store) learnLineage(lineage string) {
	if lineage != "" {
		id.lineage.CompareAndSwap(nil, &lineage)
	}
}

// replacedBy tells whether a response header comes from another cluster
// than the listed one. Members of one cluster share its id, so another id
// is proof enough.
func (id *store) replacedBy(cluster uint64) error {
	if cluster != 0 && cluster != id.cluster {
		return fmt.Errorf("etcd answered with cluster id %x, the listing with %x: another store (wiped, replaced or restored)", cluster, id.cluster)
	}
	return nil
}

// lineageGone tells whether the known lineage record is no longer there or
// is another one.
func (id *store) lineageGone(now string) error {
	if known := id.knownLineage(); known != "" && now != known {
		return fmt.Errorf("lineage record changed from %s to %s: another store (wiped, replaced or restored)",
			snapshot.LineageName(known), snapshot.LineageName(now))
	}
	return nil
}

// raise records rev as seen.
func (id *store) raise(rev int64) {
	for {
		cur := id.seen.Load()
		if rev <= cur || id.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// LineageOf is the id of the lineage record in kvs (the result of reading
// the lineage key): "" if none or unreadable.
func LineageOf(kvs []*mvccpb.KeyValue) string {
	if len(kvs) == 0 {
		return ""
	}
	var rec snapshot.LineageRecord
	if codec.UnmarshalJSON(kvs[0].Value, &rec) != nil {
		return ""
	}
	return rec.ID
}
