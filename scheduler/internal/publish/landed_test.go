package publish

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// errAnswerLost is what the test client answers for a pointer commit.
var errAnswerLost = errors.New("test: the commit's answer was lost")

// pointerCommits makes the client's transactions that put key fail: after
// reaching etcd (applied, answer lost) or before (not applied).
type pointerCommits struct {
	key     string
	applied bool
	n       atomic.Int32 // pointer commits seen
	// after, if set, runs once the commit reached etcd (applied) or not,
	// before its answer is lost: what others do before the read-back.
	after func()
	plain *clientv3.Client // the same etcd, without the fault
	log   bytes.Buffer     // the faulty publisher's log (JSON lines)
}

func (c *pointerCommits) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok || !putsKey(txn, c.key) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c.n.Add(1)
	if c.applied {
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
	}
	if c.after != nil {
		c.after()
	}
	return errAnswerLost
}

func putsKey(txn *etcdserverpb.TxnRequest, key string) bool {
	for _, op := range txn.Success {
		if p := op.GetRequestPut(); p != nil && string(p.Key) == key {
			return true
		}
	}
	return false
}

func clientWith(t *testing.T, srv *etcdtest.Server, c *pointerCommits) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(c.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// lostAnswer publishes v1 on a fresh etcd and returns a publisher whose
// pointer commits fail (after reaching etcd when applied), with its leader
// and the v1 result.
func lostAnswer(t *testing.T, applied bool) (context.Context, *Leadership, Result, *Publisher, *pointerCommits) {
	t.Helper()
	srv, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	r1, err := New(cli, layout, Options{Author: "lbscheduler/S1"}).Publish(ctx, l, snap(50, 0), "stable")
	if err != nil {
		t.Fatal(err)
	}
	ck, _ := layout.Current("BFE1")
	pc := &pointerCommits{key: ck, applied: applied, plain: cli}
	return ctx, l, r1, New(clientWith(t, srv, pc), layout, Options{Author: "lbscheduler/S1", Logger: slog.New(slog.NewJSONHandler(&pc.log, nil))}), pc
}

// A pointer commit applied by etcd whose answer was lost is found by the
// read after it (landed): the publish reports that version published, once;
// a commit that did not reach etcd is an error, and nothing was published.
func TestCommitAnswerLost(t *testing.T) {
	for _, applied := range []bool{true, false} {
		ctx, l, r1, p, pc := lostAnswer(t, applied)
		s := snap(40, 0)
		r, err := p.Publish(ctx, l, s, "answer lost")
		if pc.n.Load() != 1 {
			t.Fatalf("applied %v: %d pointer commits, want 1", applied, pc.n.Load())
		}
		ptr, ptrRev, cerr := p.Current(ctx, "BFE1")
		if cerr != nil {
			t.Fatal(cerr)
		}
		if applied {
			// The revision is the pointer write's, read back: never a
			// made-up 0 (lbctl --wait and the logs show it).
			want := Result{Outcome: Published, Version: 2, Hash: s.Meta.Hash, Lineage: r1.Lineage, Revision: ptrRev}
			if err != nil || r != want || r.Revision <= r1.Revision {
				t.Fatalf("applied, answer lost: %+v, %v; want %+v", r, err, want)
			}
			if ptr.Version != 2 || ptr.Hash != s.Meta.Hash || p.Count("published") != 1 {
				t.Fatalf("pointer v%d %s, %v counted published; want v2 %s, 1", ptr.Version, ptr.Hash, p.Count("published"), s.Meta.Hash)
			}
			continue
		}
		if !errors.Is(err, errAnswerLost) || r != (Result{}) {
			t.Fatalf("not applied: %+v, %v; want the commit's error", r, err)
		}
		if want := "publish BFE1 v2: commit: "; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Fatalf("err %q, want it to start %q", err, want)
		}
		if want := "; not published so far: /sluice/current/BFE1 has not moved since this publish read it (the commit may yet apply"; !strings.Contains(err.Error(), want) {
			t.Fatalf("err %q, want it to say %q", err, want)
		}
		if ptr.Version != 1 || ptr.Hash != r1.Hash || p.Count("published") != 0 {
			t.Fatalf("pointer v%d %s, %v counted published; want v1 %s, 0", ptr.Version, ptr.Hash, p.Count("published"), r1.Hash)
		}
	}
}

// A staged rollout's candidate commit whose answer was lost is found too:
// the pointer read back carries that candidate (version and hash), and the
// publish reports the candidate's version.
func TestCandidateCommitAnswerLost(t *testing.T) {
	ctx, l, r1, p, pc := lostAnswer(t, true)
	c := snap(40, 0)
	r, err := p.PublishCandidate(ctx, l, "BFE1", c.Meta.Hash, func() (*snapshot.Snapshot, string) { return c, "canary" },
		func(uint64) snapshot.Candidate { return snapshot.Candidate{Rollout: "r1", Percent: 10} }, nil)
	ptr, ptrRev, cerr := p.Current(ctx, "BFE1")
	if cerr != nil {
		t.Fatal(cerr)
	}
	want := Result{Outcome: Published, Version: 2, Hash: c.Meta.Hash, Lineage: r1.Lineage, Revision: ptrRev}
	if err != nil || r != want || r.Revision <= r1.Revision || pc.n.Load() != 1 {
		t.Fatalf("candidate, answer lost: %+v, %v after %d pointer commits; want %+v after 1", r, err, pc.n.Load(), want)
	}
	if err != nil || ptr.Version != 1 || ptr.Hash != r1.Hash || ptr.Candidate == nil || ptr.Candidate.Version != 2 || ptr.Candidate.Hash != c.Meta.Hash {
		t.Fatalf("pointer %+v (candidate %+v), %v; want stable v1 with candidate v2 %s", ptr, ptr.Candidate, err, c.Meta.Hash)
	}
}

// A commit whose answer was lost and whose pointer moved on before the
// read-back (another publish, e.g. a new leader's) is judged by what the
// commit wrote besides the pointer: its manifest key (immutable, written
// only by that transaction, only if absent) holding this publish's bytes
// means it applied; another manifest there means it did not; a pruned one
// is settled by the pointer's first write after the read this commit
// compared against (etcd's history); a compacted history cannot tell.
func TestCommitAnswerLostPointerMovedOn(t *testing.T) {
	for _, c := range []struct {
		name    string
		applied bool
		prune   bool // the manifest of v2 is pruned before the read-back
		compact bool // and etcd's history compacted
		want    string
	}{
		{name: "applied, moved on", applied: true,
			want: `"note":"the commit's answer was lost; confirmed by reading /sluice/snapshots/BFE1/00000000000000000002 (this publish's manifest); /sluice/current/BFE1 has moved on (to v3 at revision `},
		{name: "applied, moved on, manifest pruned", applied: true, prune: true,
			want: `"note":"the commit's answer was lost; confirmed by the history of /sluice/current/BFE1 (its first write after revision `},
		{name: "applied, moved on, pruned, compacted", applied: true, prune: true, compact: true,
			want: "; published or not: cannot tell (/sluice/current/BFE1 has moved on (to v4 at revision "},
		{name: "not applied, moved on", want: "; not published: /sluice/current/BFE1 has moved on (to v2 at revision "},
		{name: "not applied, moved on, manifest pruned", prune: true,
			want: "; not published: /sluice/current/BFE1 has moved on (to v3 at revision "},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, l, r1, p, pc := lostAnswer(t, c.applied)
			other := New(pc.plain, layout, Options{Author: "lbscheduler/S2"})
			var v2Rev int64 // the lost commit's revision, while its manifest is there
			pc.after = func() {
				pc.after = nil
				mk, _ := layout.Snapshot("BFE1", 2)
				if r, err := pc.plain.Get(ctx, mk); err == nil && len(r.Kvs) > 0 {
					v2Rev = r.Kvs[0].CreateRevision
				}
				if _, err := other.Publish(ctx, l, snap(30, 0), "another publish"); err != nil {
					t.Error(err)
				}
				if c.prune {
					if _, err := other.Publish(ctx, l, snap(20, 0), "and another"); err != nil {
						t.Error(err)
					}
					if _, err := other.Prune(ctx, l, "BFE1", 1); err != nil {
						t.Error(err)
					}
				}
				if c.compact {
					r, err := pc.plain.Get(ctx, "x")
					if err == nil {
						_, err = pc.plain.Compact(ctx, r.Header.Revision)
					}
					if err != nil {
						t.Error(err)
					}
				}
			}
			s := snap(40, 0)
			r, err := p.Publish(ctx, l, s, "answer lost")
			if pc.n.Load() != 1 {
				t.Fatalf("%d pointer commits, want 1", pc.n.Load())
			}
			if c.applied && !c.compact {
				want := Result{Outcome: Published, Version: 2, Hash: s.Meta.Hash, Lineage: r1.Lineage, Revision: v2Rev}
				if err != nil || r != want || v2Rev == 0 || p.Count("published") != 1 {
					t.Fatalf("%+v, %v (%v counted published); want %+v", r, err, p.Count("published"), want)
				}
				if !strings.Contains(pc.log.String(), `"msg":"published"`) || !strings.Contains(pc.log.String(), c.want) {
					t.Fatalf("log\n%s\nwant a published line with %s", pc.log.String(), c.want)
				}
				return
			}
			if err == nil || r != (Result{}) || !errors.Is(err, errAnswerLost) || !strings.Contains(err.Error(), c.want) ||
				!strings.HasPrefix(err.Error(), "publish BFE1 v2: commit: ") || p.Count("published") != 0 {
				t.Fatalf("%+v, %v; want the commit's error, saying %q", r, err, c.want)
			}
		})
	}
}
