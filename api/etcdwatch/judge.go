package etcdwatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A revision below one already seen is only a suspicion that etcd is
// another store. A response header carries the revision of the member that
// sent it, at the time it was made: a member still catching up (after a
// restart, a partition, a slow disk) answers with an older revision than a
// quorum read on another member saw, and a watch response queued before a
// newer read (the store check runs beside the watch) is older than that
// read too. Only a linearizable read — a plain Get, which goes through the
// raft leader's ReadIndex and answers with the cluster's current revision —
// tells: at or above the revision seen (and, with LineageKey, the same
// lineage record) it is the same store behind; below it, or with another
// cluster id or lineage, it is another store.

// judgement is what a response header says about the store.
type judgement int

const (
	sameStore   judgement = iota // nothing went back
	behind                       // went back, and a quorum read confirmed the same store just now
	stillBehind                  // went back, explained by a recent confirmation (no read)
	replaced                     // another store (the error says why)
	unconfirmed                  // went back, and the quorum read failed: nothing is known
)

// reading is what a linearizable read of the store identity answered.
type reading struct {
	cluster uint64
	rev     int64
	lineage string // the lineage record's id; "" none (or no LineageKey)
}

// confirmer reads the store identity through the raft leader.
type confirmer func(context.Context) (reading, error)

// errUnconfirmed wraps the failed confirming read.
var errUnconfirmed = errors.New("unconfirmed")

// judge decides about a response with cluster id and revision rev. A
// revision below the one seen is confirmed by confirm, unless a
// confirmation within recheck explained a response at or below rev already:
// one member's responses only move forward, and a wiped store starting
// again from revision 1 falls below the last one explained. now is the
// time of the response.
func (id *store) judge(ctx context.Context, cluster uint64, rev int64, now time.Time, recheck time.Duration, lineageKey bool, confirm confirmer) (judgement, error) {
	if err := id.replacedBy(cluster); err != nil {
		return replaced, err
	}
	seen := id.seen.Load()
	if rev >= seen {
		return sameStore, nil
	}
	id.lagMu.Lock()
	explained := id.lagRev != 0 && rev >= id.lagRev && now.Sub(id.lagAt) < recheck
	if explained {
		id.lagRev = rev
	}
	id.lagMu.Unlock()
	if explained {
		return stillBehind, nil
	}
	r, err := confirm(ctx) // seen was loaded before this read began (see quorumSays)
	if err != nil {
		return unconfirmed, fmt.Errorf("etcd revision went back from %d to %d, and the confirming read failed: %w: %w", seen, rev, errUnconfirmed, err)
	}
	if back, err := id.quorumSays(r, seen, lineageKey); back {
		return replaced, fmt.Errorf("etcd revision went back from %d to %d, and a quorum read answered %d: another store (wiped, replaced or restored)", seen, rev, r.rev)
	} else if err != nil {
		return replaced, err
	}
	id.lagMu.Lock()
	id.lagRev, id.lagAt = rev, now
	id.lagMu.Unlock()
	return behind, fmt.Errorf("etcd revision went back from %d to %d, and a quorum read answered %d: the same store, the response came from a member behind (or was queued before a newer read)", seen, rev, r.rev)
}

// quorumSays judges r, a linearizable read of the store identity, against
// seen: a revision seen from this store BEFORE the read began. Such a read
// answers at or above every revision committed before it began, so only a
// reading below seen says another store (back). seen must not be loaded
// after the read: the watch loop and the store check raise it side by side,
// and a revision a response brought in meanwhile may be above the reading
// of the very same store (the false store_replaced of the row-flap chaos
// run). Another cluster id or lineage record is err. The same store: the
// lineage is learnt, r.rev raised into seen, and back is false, err nil.
func (id *store) quorumSays(r reading, seen int64, lineageKey bool) (back bool, err error) {
	if err := id.replacedBy(r.cluster); err != nil {
		return false, err
	}
	if r.rev < seen {
		return true, nil
	}
	if lineageKey {
		if err := id.lineageGone(r.lineage); err != nil {
			return false, err
		}
		id.learnLineage(r.lineage)
	}
	id.raise(r.rev)
	return false, nil
}

// readIdentity is a linearizable read of the store identity: LineageKey,
// or Key counting only.
func (c *Config) readIdentity(ctx context.Context) (reading, error) {
	key, opts := c.Key, []clientv3.OpOption{clientv3.WithCountOnly()}
	if c.LineageKey != "" {
		key, opts = c.LineageKey, nil
	}
	octx, cancel := context.WithTimeout(ctx, c.OpTimeout)
	defer cancel()
	r, err := c.Client.Get(octx, key, opts...)
	if err != nil {
		return reading{}, err
	}
	out := reading{cluster: r.Header.ClusterId, rev: r.Header.Revision}
	if c.LineageKey != "" {
		out.lineage = LineageOf(r.Kvs)
	}
	return out, nil
}
