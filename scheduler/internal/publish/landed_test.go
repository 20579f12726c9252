package publish

import (
	"context"
	"errors"
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
	pc := &pointerCommits{key: ck, applied: applied}
	return ctx, l, r1, New(clientWith(t, srv, pc), layout, Options{Author: "lbscheduler/S1"}), pc
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
