// Package publish writes snapshots to etcd as the elected scheduler leader.
//
// A publish for one proxy cluster is: read the prefix's lineage (minting one
// if there is none: a fresh or wiped etcd); skip if current/<pc> already
// carries the snapshot's content hash in that lineage; otherwise pick the
// version (one above every version of the lineage in sight, see
// versionFloor), validate (I7), encode, write the
// content-addressed parts (each in its own transaction fenced on the leader's
// election key), then ONE transaction fenced on the election key that writes
// the immutable manifest snapshots/<pc>/<version> (only if absent) and moves
// current/<pc> (only if it did not move since we read it, and the lineage
// record is still the one read). Proxies only
// follow current/<pc>, so a crash before that transaction leaves nothing a
// proxy can see; the orphaned parts are collected by CollectParts.
//
// A Publisher is safe for concurrent use, but the scheduler calls it from
// one goroutine (publishes and part collection never race each other).
package publish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// Sentinel errors callers branch on.
var (
	// ErrFenced: the leadership term ended; nothing was committed.
	ErrFenced = errors.New("fenced: not the leader")
	// ErrInvalid: the snapshot failed validate.Snapshot; nothing was written.
	ErrInvalid = errors.New("invalid snapshot")
	// ErrConflict: current/<pc> kept moving under us (another writer?).
	ErrConflict = errors.New("current pointer moved concurrently")
)

// Outcome of a successful Publish.
type Outcome string

const (
	// Published: a new version was committed.
	Published Outcome = "published"
	// Unchanged: current already carries this content; nothing was written.
	Unchanged Outcome = "unchanged"
)

// Result describes a successful Publish.
type Result struct {
	Outcome Outcome
	// Lineage and Version are the live snapshot's after the call (the new
	// one if Published).
	Lineage string
	Version uint64
	Hash    string
	// Revision is the etcd revision of the pointer write (0 if Unchanged;
	// after a commit whose answer was lost, that write's revision as found
	// by the read-back: the pointer's mod revision, or once the pointer
	// moved on, the create revision of the manifest key the same commit
	// wrote, or the pointer's first write after the publish read it).
	Revision int64
}

// Options tune a Publisher.
type Options struct {
	// Author is written into Meta.Author, e.g. "lbscheduler/S1".
	Author string
	// Now stamps Meta.CreatedAt (default time.Now).
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives sluice_scheduler_publishes_total; nil: none.
	Registerer prometheus.Registerer
	// NoPush writes pointers without a snapshot.Push (the manifest and new
	// parts the watch event carries to every proxy). Proxies of releases
	// before the push refuse a pointer with one and keep their snapshot;
	// set it while such proxies still watch. Default false: push.
	NoPush bool
}

// Publisher publishes snapshots and maintains history.
type Publisher struct {
	cli    *clientv3.Client
	layout keys.Layout
	author string
	now    func() time.Time
	log    *slog.Logger
	m      *prometheus.CounterVec
	noPush bool

	orphans map[string]time.Time // part digest → first seen unreferenced
	refs    map[string][]string  // manifest key@mod revision → parts it references
}

// New returns a Publisher writing under layout.
func New(cli *clientv3.Client, layout keys.Layout, o Options) *Publisher {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_scheduler_publishes_total",
		Help: "Snapshot publish attempts by result: published, unchanged, fenced, conflict, invalid, error.",
	}, []string{"result"})
	for _, r := range []string{"published", "unchanged", "fenced", "conflict", "invalid", "error"} {
		m.WithLabelValues(r)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(m)
	}
	return &Publisher{cli: cli, layout: layout, author: o.Author, now: o.Now, log: o.Logger, m: m, noPush: o.NoPush, orphans: map[string]time.Time{}, refs: map[string][]string{}}
}

// Count returns how many publishes ended with result (for tests and logs).
func (p *Publisher) Count(result string) float64 {
	return counterValue(p.m.WithLabelValues(result))
}

const attempts = 3

// Publish makes s the live snapshot of s.Meta.ProxyCluster, as leader lead.
// s is not modified: its Meta is filled on a copy (Lineage = the prefix's
// lineage, minted if there is none; Version = one above every version of
// that lineage in sight — the pointer, the newest manifest key, what the
// proxies of pc applied —; Parent = current, Author, Reason, CreatedAt;
// Hash if empty).
//
// Errors: ErrFenced (term over), ErrInvalid, ErrConflict, or an etcd error.
// After an etcd error the call is safe to repeat: a publish whose response
// was lost is found on the pointer and reported as Unchanged, never
// published twice. A commit whose answer was lost is read back first
// (landed): found applied — on the pointer, or, once the pointer moved on,
// by its manifest key or the pointer's history — it is Published.
func (p *Publisher) Publish(ctx context.Context, lead *Leadership, s *snapshot.Snapshot, reason string) (Result, error) {
	hash := s.Meta.Hash
	if hash == "" {
		hash = snapshot.ContentHash(s)
	}
	return p.PublishHash(ctx, lead, s.Meta.ProxyCluster, hash, func() (*snapshot.Snapshot, string) { return s, reason })
}

// PublishHash is Publish for a snapshot known by its content hash: build is
// called (once) only when the live pointer does not carry hash already, so
// a scheduler assembles only the snapshots that change. build returns the
// snapshot (its Meta.Hash must be hash) and the publish reason.
func (p *Publisher) PublishHash(ctx context.Context, lead *Leadership, pc, hash string, build func() (*snapshot.Snapshot, string)) (Result, error) {
	return p.count(p.publish(ctx, lead, pc, hash, build, plainPublish))
}

// count counts a publish's result in sluice_scheduler_publishes_total.
func (p *Publisher) count(res Result, err error) (Result, error) {
	switch {
	case err == nil:
		p.m.WithLabelValues(string(res.Outcome)).Inc()
	case errors.Is(err, ErrFenced):
		p.m.WithLabelValues("fenced").Inc()
	case errors.Is(err, ErrInvalid):
		p.m.WithLabelValues("invalid").Inc()
	case errors.Is(err, ErrConflict):
		p.m.WithLabelValues("conflict").Inc()
	default:
		p.m.WithLabelValues("error").Inc()
	}
	return res, err
}

// how says what a publish writes besides the manifest (publish_staged.go).
type how struct {
	// unchanged: the pointer already carries hash (nothing to publish).
	unchanged func(cur snapshot.Pointer, lineage, hash string) bool
	// pointer is the new pointer value for the new version.
	pointer func(cur snapshot.Pointer, lineage string, version uint64, hash string) snapshot.Pointer
	// extra operations committed with the pointer (given the new pointer).
	extra func(cur, next snapshot.Pointer) []clientv3.Op
}

// plainPublish makes the new version every proxy's snapshot.
var plainPublish = how{
	unchanged: func(cur snapshot.Pointer, lineage, hash string) bool {
		return cur.Hash == hash && cur.Lineage == lineage && cur.Candidate == nil
	},
	pointer: func(_ snapshot.Pointer, lineage string, version uint64, hash string) snapshot.Pointer {
		return snapshot.Pointer{Lineage: lineage, Version: version, Hash: hash}
	},
}

func (p *Publisher) publish(ctx context.Context, lead *Leadership, pc, hash string, build func() (*snapshot.Snapshot, string), w how) (Result, error) {
	curKey, err := p.layout.Current(pc)
	if err != nil {
		return Result{}, fmt.Errorf("publish: %w: %w", ErrInvalid, err)
	}
	var (
		snap   snapshot.Snapshot
		reason string
		built  bool
	)
	for range attempts {
		h, err := p.readHead(ctx, curKey)
		if err != nil {
			return Result{}, fmt.Errorf("publish %s: %w", pc, err)
		}
		if h.linRev == 0 {
			if err := p.mintLineage(ctx, lead); err != nil {
				return Result{}, fmt.Errorf("publish %s: %w", pc, err)
			}
			if h, err = p.readHead(ctx, curKey); err != nil {
				return Result{}, fmt.Errorf("publish %s: %w", pc, err)
			}
			if h.linRev == 0 {
				return Result{}, fmt.Errorf("publish %s: %w: the lineage key vanished right after it was minted", pc, ErrConflict)
			}
		}
		ptr, curRev, lineage := h.ptr, h.ptrRev, h.lineage.ID
		if w.unchanged(ptr, lineage, hash) {
			return Result{Outcome: Unchanged, Version: ptr.Version, Hash: hash, Lineage: lineage}, nil
		}
		if !built {
			s, why := build()
			if s == nil || s.Meta.ProxyCluster != pc {
				return Result{}, fmt.Errorf("publish %s: %w: no snapshot for this proxy cluster", pc, ErrInvalid)
			}
			snap, reason, built = *s, why, true
			if snap.Meta.Hash == "" {
				snap.Meta.Hash = hash
			}
			if snap.Meta.Hash != hash {
				return Result{}, fmt.Errorf("publish %s: %w: snapshot hash %s is not the announced %s", pc, ErrInvalid, snap.Meta.Hash, hash)
			}
		}
		floor, err := p.versionFloor(ctx, pc, lineage)
		if err != nil {
			return Result{}, fmt.Errorf("publish %s: %w", pc, err)
		}
		snap.Meta.Lineage = lineage
		snap.Meta.Version = max(ptr.Version, floor) + 1
		snap.Meta.Parent = 0
		if ptr.Lineage == lineage {
			snap.Meta.Parent = ptr.Version
		}
		snap.Meta.Author = p.author
		snap.Meta.Reason = reason
		snap.Meta.CreatedAt = p.now().UTC().Truncate(time.Millisecond)
		if err := validate.Snapshot(&snap); err != nil {
			return Result{}, fmt.Errorf("publish %s v%d: %w: %w", pc, snap.Meta.Version, ErrInvalid, err)
		}
		m, parts, err := snapshot.EncodeStore(&snap)
		if err != nil {
			return Result{}, fmt.Errorf("publish %s: %w: %w", pc, ErrInvalid, err)
		}
		fresh, err := p.writeParts(ctx, lead, parts)
		if err != nil {
			return Result{}, fmt.Errorf("publish %s v%d: %w", pc, snap.Meta.Version, err)
		}
		manKey, err := p.layout.Snapshot(pc, snap.Meta.Version)
		if err != nil {
			return Result{}, fmt.Errorf("publish: %w", err)
		}
		manRaw, err := json.Marshal(m)
		if err != nil {
			return Result{}, fmt.Errorf("publish: encode manifest: %w", err)
		}
		next := w.pointer(ptr, lineage, snap.Meta.Version, hash)
		var ops []clientv3.Op
		if w.extra != nil {
			ops = w.extra(ptr, next)
		}
		written := next
		if !p.noPush {
			// The new version's manifest and parts ride on the pointer
			// (snapshot.Push): the manifest key is still written, for
			// history and for whoever reads it.
			if written.Push, err = snapshot.NewPush(m, fresh); err != nil {
				return Result{}, fmt.Errorf("publish %s: %w: %w", pc, ErrInvalid, err)
			}
		}
		ptrRaw, _ := json.Marshal(written)
		ops = append([]clientv3.Op{clientv3.OpPut(manKey, string(manRaw)), clientv3.OpPut(curKey, string(ptrRaw))}, ops...)
		r, err := p.cli.Txn(ctx).If(
			lead.Fence(),
			clientv3.Compare(clientv3.CreateRevision(manKey), "=", 0),
			clientv3.Compare(clientv3.ModRevision(curKey), "=", curRev),
			// The lineage must still be the one read: a wipe of the prefix
			// under us gets a new lineage, not our version numbers.
			clientv3.Compare(clientv3.CreateRevision(p.layout.Lineage()), "=", h.linRev),
		).Then(ops...).Else(
			clientv3.OpGet(lead.Key, clientv3.WithKeysOnly()),
		).Commit()
		if err != nil {
			// The request may have been applied and only the answer lost.
			c := commit{pc: pc, want: next, version: snap.Meta.Version, hash: hash, lineage: lineage, reason: reason,
				curKey: curKey, readRev: h.rev, ptrRaw: ptrRaw, manKey: manKey, manRaw: manRaw}
			res, ok, why := p.landed(ctx, c)
			if ok {
				return res, nil
			}
			return Result{}, fmt.Errorf("publish %s v%d: commit: %w; %s", pc, snap.Meta.Version, err, why)
		}
		if r.Succeeded {
			p.log.Info("published", "proxy_cluster", pc, "lineage", lineage, "version", snap.Meta.Version, "hash", hash, "reason", reason)
			return Result{Outcome: Published, Version: snap.Meta.Version, Hash: hash, Lineage: lineage, Revision: r.Header.Revision}, nil
		}
		if !leaderKeyHolds(r.Responses[0].GetResponseRange().Kvs, lead.Rev) {
			return Result{}, fmt.Errorf("publish %s v%d: %w", pc, snap.Meta.Version, ErrFenced)
		}
		// The pointer moved, the version exists or the lineage changed: read again.
	}
	return Result{}, fmt.Errorf("publish %s: %w after %d attempts", pc, ErrConflict, attempts)
}

func leaderKeyHolds(kvs []*mvccpb.KeyValue, rev int64) bool {
	return len(kvs) == 1 && kvs[0].CreateRevision == rev
}

// commit is one pointer transaction whose answer did not arrive: what it
// wrote (the manifest key and the pointer, byte for byte) and the revision
// its compare-and-swap read the pointer at.
type commit struct {
	pc      string
	want    snapshot.Pointer // the pointer written, decoded (without its push)
	version uint64           // the version it publishes (a candidate's, for a staged rollout)
	hash    string
	lineage string
	reason  string
	curKey  string
	readRev int64 // the revision the pointer was read at; the commit required it unchanged since
	ptrRaw  []byte
	manKey  string
	manRaw  []byte
}

// landed checks, after a failed commit, whether it applied anyway. It runs
// even when ctx is done (the commit may have failed because of it), within
// ShutdownTimeout then. Unless it applied, why says what was found (the
// error's tail).
//
//   - The pointer is the one written: it applied (its mod revision is the
//     write's).
//   - The pointer is still the one read: it did not apply, yet — the request
//     may still be in flight, so nothing more can be said.
//   - The pointer moved on: the commit's compare (the pointer unchanged since
//     readRev) can never hold again, so it applied before the move or never.
//     The manifest key is written only by that same transaction, only if
//     absent, and never rewritten: holding this commit's bytes, the commit
//     applied (at the manifest's create revision); holding another
//     manifest, it did not. Absent, it never was written or was pruned
//     since: then the first write of the pointer after readRev (etcd's
//     history, replayed by a watch) is this commit's or not. A compacted
//     history cannot tell: the error says so.
func (p *Publisher) landed(ctx context.Context, c commit) (Result, bool, string) {
	timeout := 5 * time.Second
	if ctx.Err() != nil {
		timeout = ShutdownTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	r, err := p.cli.Txn(ctx).Then(clientv3.OpGet(c.curKey), clientv3.OpGet(c.manKey)).Commit()
	if err != nil {
		return Result{}, false, fmt.Sprintf("published or not: cannot tell (reading %s back failed: %v)", c.curKey, err)
	}
	var (
		ptr    snapshot.Pointer
		ptrRev int64
	)
	if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		if err := codec.UnmarshalJSON(kvs[0].Value, &ptr); err != nil {
			return Result{}, false, fmt.Sprintf("published or not: cannot tell (%s read back: %v)", c.curKey, err)
		}
		ptrRev = kvs[0].ModRevision
	}
	published := func(rev int64, note string) (Result, bool, string) {
		p.log.Info("published", "proxy_cluster", c.pc, "lineage", c.lineage, "version", c.version, "hash", c.hash, "reason", c.reason,
			"revision", rev, "note", "the commit's answer was lost; "+note)
		return Result{Outcome: Published, Version: c.version, Hash: c.hash, Lineage: c.lineage, Revision: rev}, true, ""
	}
	if samePointer(ptr, c.want) {
		// The pointer read back is the one written (its version's manifest
		// was created by that very commit), so its mod revision is the write's.
		return published(ptrRev, "the pointer read back is this one")
	}
	if ptrRev == 0 {
		return Result{}, false, fmt.Sprintf("published or not: cannot tell (%s is gone: was etcd wiped?)", c.curKey)
	}
	if ptrRev <= c.readRev {
		return Result{}, false, fmt.Sprintf("not published so far: %s has not moved since this publish read it (the commit may yet apply; the next round reads it again)", c.curKey)
	}
	moved := fmt.Sprintf("%s has moved on (to v%d at revision %d)", c.curKey, ptr.Version, ptrRev)
	if kvs := r.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if bytes.Equal(kvs[0].Value, c.manRaw) {
			return published(kvs[0].CreateRevision, fmt.Sprintf("confirmed by reading %s (this publish's manifest); %s", c.manKey, moved))
		}
		return Result{}, false, fmt.Sprintf("not published: %s and %s holds another publish's manifest", moved, c.manKey)
	}
	first, err := p.firstWrite(ctx, c.curKey, c.readRev+1)
	switch {
	case err == nil && first == nil:
		err = errors.New("no write")
		fallthrough
	case err != nil:
		return Result{}, false, fmt.Sprintf("published or not: cannot tell (%s and %s is gone, pruned or never written; the pointer's history: %v)", moved, c.manKey, err)
	case first != nil && first.Type == mvccpb.PUT && bytes.Equal(first.Kv.Value, c.ptrRaw):
		return published(first.Kv.ModRevision, fmt.Sprintf("confirmed by the history of %s (its first write after revision %d is this one; %s is pruned)", c.curKey, c.readRev, c.manKey))
	}
	return Result{}, false, fmt.Sprintf("not published: %s and its first write after revision %d is another publish's", moved, c.readRev)
}

// samePointer: ptr is want (lineage, version, hash; candidate version and
// hash).
func samePointer(ptr, want snapshot.Pointer) bool {
	if ptr.Hash != want.Hash || ptr.Version != want.Version || ptr.Lineage != want.Lineage || (ptr.Candidate == nil) != (want.Candidate == nil) {
		return false
	}
	return want.Candidate == nil || (ptr.Candidate.Version == want.Candidate.Version && ptr.Candidate.Hash == want.Candidate.Hash)
}

// firstWrite is the first event of key at revision from or later, from
// etcd's history (nil, nil if there is none: cannot happen for a key that
// changed since). A compacted history is an error.
func (p *Publisher) firstWrite(ctx context.Context, key string, from int64) (*clientv3.Event, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range p.cli.Watch(wctx, key, clientv3.WithRev(from)) {
		if resp.CompactRevision != 0 {
			return nil, fmt.Errorf("compacted up to revision %d", resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return nil, err
		}
		if len(resp.Events) > 0 {
			return resp.Events[0], nil
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("the watch ended")
}

// WriteParts stores the parts that are not stored yet (parts are content
// addressed: a stored part is the same bytes), in transactions fenced on
// lead of at most maxOpsPerTxn parts and maxTxnBytes (a part may be up to
// snapshot.PartSize, so a big one goes alone). The existence check is safe
// against part collection: only a leader collects, fenced on its term, and
// a publish's manifest commits only within the term that checked.
func (p *Publisher) WriteParts(ctx context.Context, lead *Leadership, parts []snapshot.Part) error {
	_, err := p.writeParts(ctx, lead, parts)
	return err
}

// writeParts is WriteParts; it returns the parts it wrote.
func (p *Publisher) writeParts(ctx context.Context, lead *Leadership, parts []snapshot.Part) ([]snapshot.Part, error) {
	missing, err := p.missingParts(ctx, parts)
	if err != nil {
		return nil, err
	}
	fresh := missing
	for len(missing) > 0 {
		n, size := 0, 0
		for n < len(missing) && n < maxOpsPerTxn && (n == 0 || size+len(missing[n].Data) <= maxTxnBytes) {
			size += len(missing[n].Data)
			n++
		}
		batch := missing[:n]
		missing = missing[n:]
		ops := make([]clientv3.Op, 0, len(batch))
		for _, part := range batch {
			k, err := p.layout.Part(part.Digest)
			if err != nil {
				return nil, fmt.Errorf("write part: %w", err)
			}
			ops = append(ops, clientv3.OpPut(k, string(part.Data)))
		}
		r, err := p.cli.Txn(ctx).If(lead.Fence()).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("write part %s (+%d more): %w", batch[0].Digest, len(batch)-1, err)
		}
		if !r.Succeeded {
			return nil, fmt.Errorf("write part %s: %w", batch[0].Digest, ErrFenced)
		}
	}
	return fresh, nil
}

// maxTxnBytes keeps a batch of parts below etcd's default 1.5 MiB request limit.
const maxTxnBytes = 1 << 20

// missingParts returns the parts not in etcd, asking in read-only
// transactions of count-only gets.
func (p *Publisher) missingParts(ctx context.Context, parts []snapshot.Part) ([]snapshot.Part, error) {
	var missing []snapshot.Part
	for off := 0; off < len(parts); off += maxOpsPerTxn {
		batch := parts[off:min(off+maxOpsPerTxn, len(parts))]
		ops := make([]clientv3.Op, 0, len(batch))
		for _, part := range batch {
			k, err := p.layout.Part(part.Digest)
			if err != nil {
				return nil, fmt.Errorf("write part: %w", err)
			}
			ops = append(ops, clientv3.OpGet(k, clientv3.WithCountOnly()))
		}
		r, err := p.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("check parts: %w", err)
		}
		for i, resp := range r.Responses {
			if resp.GetResponseRange().Count == 0 {
				missing = append(missing, batch[i])
			}
		}
	}
	return missing, nil
}

// Current reads current/<pc>: the pointer (zero if absent) and the key's mod
// revision (0 if absent).
func (p *Publisher) Current(ctx context.Context, pc string) (snapshot.Pointer, int64, error) {
	k, err := p.layout.Current(pc)
	if err != nil {
		return snapshot.Pointer{}, 0, err
	}
	r, err := p.cli.Get(ctx, k)
	if err != nil {
		return snapshot.Pointer{}, 0, fmt.Errorf("read %s: %w", k, err)
	}
	if len(r.Kvs) == 0 {
		return snapshot.Pointer{}, 0, nil
	}
	var ptr snapshot.Pointer
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &ptr); err != nil {
		return snapshot.Pointer{}, 0, fmt.Errorf("read %s: %w", k, err)
	}
	return ptr, r.Kvs[0].ModRevision, nil
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
