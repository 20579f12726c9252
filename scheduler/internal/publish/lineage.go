package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// head is what one publish attempt starts from: the pointer and the lineage
// record, read at one revision.
type head struct {
	ptr     snapshot.Pointer
	ptrRev  int64 // mod revision of current/<pc>; 0 if absent
	lineage snapshot.LineageRecord
	linRev  int64 // create revision of the lineage key; 0 if absent
	rev     int64 // the revision both were read at
}

// readHead reads current/<pc> and the lineage record in one request.
func (p *Publisher) readHead(ctx context.Context, curKey string) (head, error) {
	lk := p.layout.Lineage()
	r, err := p.cli.Txn(ctx).Then(clientv3.OpGet(curKey), clientv3.OpGet(lk)).Commit()
	if err != nil {
		return head{}, fmt.Errorf("read %s and %s: %w", curKey, lk, err)
	}
	h := head{rev: r.Header.Revision}
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := codec.UnmarshalJSON(kvs[0].Value, &h.ptr); err != nil {
			return head{}, fmt.Errorf("read %s: %w", curKey, err)
		}
		h.ptrRev = kvs[0].ModRevision
	}
	if kvs := r.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := codec.UnmarshalJSON(kvs[0].Value, &h.lineage); err != nil {
			return head{}, fmt.Errorf("read %s: %w", lk, err)
		}
		if err := snapshot.ValidLineage(h.lineage.ID); err != nil || h.lineage.ID == "" {
			return head{}, fmt.Errorf("read %s: lineage id %q is not valid (want %s); delete the key to have a new lineage minted", lk, h.lineage.ID, snapshot.LineagePattern)
		}
		h.linRev = kvs[0].CreateRevision
	}
	return h, nil
}

// mintLineage records a new lineage under the prefix, fenced on lead and only
// if there is none (another scheduler may have been faster: then the caller
// reads again and uses that one).
func (p *Publisher) mintLineage(ctx context.Context, lead *Leadership) error {
	lk := p.layout.Lineage()
	rec := snapshot.LineageRecord{ID: snapshot.NewLineageID(p.now()), CreatedAt: p.now().UTC().Truncate(time.Millisecond), CreatedBy: p.author}
	raw, _ := json.Marshal(rec)
	r, err := p.cli.Txn(ctx).If(lead.Fence(), clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)).
		Then(clientv3.OpPut(lk, string(raw))).
		Else(clientv3.OpGet(lead.Key, clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return fmt.Errorf("mint lineage: %w", err)
	}
	if !r.Succeeded {
		if !leaderKeyHolds(r.Responses[0].GetResponseRange().Kvs, lead.Rev) {
			return fmt.Errorf("mint lineage: %w", ErrFenced)
		}
		return nil // someone else minted it
	}
	p.log.Warn("no lineage under the prefix (fresh or wiped etcd): minted a new one; proxies will follow it whatever versions they hold",
		"lineage", rec.ID, "key", lk)
	return nil
}

// Lineage reads the lineage record (zero if none was minted yet).
func (p *Publisher) Lineage(ctx context.Context) (snapshot.LineageRecord, error) {
	lk := p.layout.Lineage()
	r, err := p.cli.Get(ctx, lk)
	if err != nil {
		return snapshot.LineageRecord{}, fmt.Errorf("read %s: %w", lk, err)
	}
	var rec snapshot.LineageRecord
	if len(r.Kvs) > 0 {
		if err := codec.UnmarshalJSON(r.Kvs[0].Value, &rec); err != nil {
			return snapshot.LineageRecord{}, fmt.Errorf("read %s: %w", lk, err)
		}
	}
	return rec, nil
}

// versionFloor is the highest version of pc the scheduler can see in
// lineage: the newest manifest key (a leftover above the pointer, e.g. from
// a restored backup or a hand-moved pointer) and every version a proxy of pc
// in that lineage applied, saw or rejected. A new version goes above it, so
// that no proxy refuses it as older and no manifest key is taken.
func (p *Publisher) versionFloor(ctx context.Context, pc, lineage string) (uint64, error) {
	spfx, err := p.layout.SnapshotPrefix(pc)
	if err != nil {
		return 0, err
	}
	stpfx, err := p.layout.StatusPrefix(pc)
	if err != nil {
		return 0, err
	}
	r, err := p.cli.Txn(ctx).Then(
		clientv3.OpGet(spfx, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1)),
		clientv3.OpGet(stpfx, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("read %s and %s: %w", spfx, stpfx, err)
	}
	var floor uint64
	for _, kv := range r.Responses[0].GetResponseRange().Kvs {
		if k, err := p.layout.ParseSnapshot(string(kv.Key)); err == nil {
			floor = max(floor, k.Version)
		}
	}
	for _, kv := range r.Responses[1].GetResponseRange().Kvs {
		var st report.ProxyStatus
		if codec.UnmarshalJSON(kv.Value, &st) != nil || st.AppliedLineage != lineage {
			continue // another lineage's versions do not compare with ours
		}
		if v := max(st.AppliedVersion, st.LatestVersion, st.RejectedVersion); v > floor {
			p.log.Info("a proxy holds a version above the live pointer; publishing above it",
				"proxy_cluster", pc, "proxy", st.ID, "lineage", lineage, "version", v)
			floor = v
		}
	}
	return floor, nil
}
