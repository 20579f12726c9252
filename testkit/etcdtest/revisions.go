package etcdtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Reads records the header revisions of the range (Get) answers a client
// got: a test learns from it that a component's periodic read has run past
// some revision, without waiting blindly. While failing, the client's range
// requests fail without reaching etcd (its watches go on).
type Reads struct {
	mu      sync.Mutex
	revs    []int64
	failing bool
}

// ErrFailing is what a range request answers while Reads is failing.
var ErrFailing = errors.New("etcdtest: range requests made to fail")

// SetFailing makes the client's range requests fail (true) or pass again.
func (r *Reads) SetFailing(on bool) {
	r.mu.Lock()
	r.failing = on
	r.mu.Unlock()
}

// Client returns a client of s whose range answers r records; it is closed
// at cleanup.
func (r *Reads) Client(t interface {
	Fatal(...any)
	Cleanup(func())
}, s *Server) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(r.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (r *Reads) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if _, isRange := req.(*etcdserverpb.RangeRequest); isRange {
		r.mu.Lock()
		failing := r.failing
		r.mu.Unlock()
		if failing {
			return ErrFailing
		}
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if rr, ok := reply.(*etcdserverpb.RangeResponse); ok && err == nil && rr.Header != nil {
		r.mu.Lock()
		r.revs = append(r.revs, rr.Header.Revision)
		r.mu.Unlock()
	}
	return err
}

// AtLeast counts the range answers at revision rev or later.
func (r *Reads) AtLeast(rev int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, v := range r.revs {
		if v >= rev {
			n++
		}
	}
	return n
}
