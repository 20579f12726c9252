package etcdclient

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// authRetryGap is how long a failed Authenticate answers every caller
// before it is tried again (a wrong password must not hammer etcd).
const authRetryGap = time.Second

// auth holds the token of a password-authenticated client. One caller at a
// time authenticates; the others wait for its token (or their context).
type auth struct {
	user, password string
	timeout        time.Duration // of one Authenticate call
	// authenticate calls etcd's Authenticate (set once the client exists).
	authenticate func(ctx context.Context, user, password string) (string, error)

	lock chan struct{} // one slot: held while authenticating

	mu       sync.Mutex
	token    string
	known    bool // token is current ("" with auth disabled in etcd)
	failErr  error
	failedAt time.Time
}

func newAuth(user, password string, timeout time.Duration) *auth {
	return &auth{user: user, password: password, timeout: timeout, lock: make(chan struct{}, 1)}
}

func (a *auth) cached(now time.Time) (tok string, known bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known {
		return a.token, true, nil
	}
	if a.failErr != nil && now.Sub(a.failedAt) < authRetryGap {
		return "", false, a.failErr
	}
	return "", false, nil
}

// get returns the token to send ("" for none), authenticating when none is
// current.
func (a *auth) get(ctx context.Context) (string, error) {
	if a.user == "" {
		return "", nil
	}
	for {
		if tok, known, err := a.cached(time.Now()); known || err != nil {
			return tok, err
		}
		select {
		case a.lock <- struct{}{}:
		case <-ctx.Done():
			return "", status.FromContextError(ctx.Err()).Err()
		}
		if _, known, err := a.cached(time.Now()); known || err != nil {
			<-a.lock
			continue // another caller finished meanwhile
		}
		actx, cancel := context.WithTimeout(ctx, a.timeout) // a caller without a deadline learns why
		tok, err := a.authenticate(actx, a.user, a.password)
		cancel()
		a.mu.Lock()
		switch {
		case err == nil:
			a.token, a.known, a.failErr = tok, true, nil
		case isEtcd(err, rpctypes.ErrAuthNotEnabled):
			a.token, a.known, a.failErr = "", true, nil
		case ctx.Err() == nil && !isTransient(err):
			a.failErr, a.failedAt = err, time.Now() // e.g. a wrong password
		}
		a.mu.Unlock()
		<-a.lock
		if err != nil && !isEtcd(err, rpctypes.ErrAuthNotEnabled) {
			return "", err
		}
	}
}

// rejected drops tok when err says etcd no longer accepts it (restarted,
// expired, auth re-enabled); it reports whether the call may be retried
// with a new token.
func (a *auth) rejected(err error, tok string) bool {
	if a.user == "" || err == nil || !tokenRejected(err) {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.known && a.token == tok {
		a.known, a.token = false, ""
	}
	return true
}

func tokenRejected(err error) bool {
	return isEtcd(err, rpctypes.ErrInvalidAuthToken) || isEtcd(err, rpctypes.ErrUserEmpty)
}

func isTransient(err error) bool {
	_, class := classify(err)
	return class == ClassUnreachable || class == ClassDNS || class == ClassTimeout || class == ClassTLS
}

func withToken(ctx context.Context, tok string) context.Context {
	if tok == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, tok)
}

// unary runs inside the etcd client's retry interceptor, once per attempt:
// it attaches the token, records the outcome, and retries once with a new
// token when etcd rejected the old one.
func (c *Client) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		// Never with a token: etcd before 3.4.28 rejects a stale one here.
		err := invoker(ctx, method, req, reply, cc, opts...)
		c.health.observe(err, "")
		return err
	}
	for attempt := 0; ; attempt++ {
		tok, err := c.auth.get(ctx)
		if err != nil {
			return err // the Authenticate call recorded its outcome
		}
		err = invoker(withToken(ctx, tok), method, req, reply, cc, opts...)
		if c.auth.rejected(err, tok) && attempt == 0 {
			continue
		}
		c.health.observe(err, requestKey(req))
		return err
	}
}

// stream attaches the token to a new stream and watches its answers for a
// rejected token (a watch is cancelled with "invalid auth token"), so the
// next stream authenticates again.
func (c *Client) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tok, err := c.auth.get(ctx)
	if err != nil {
		return nil, err
	}
	s, err := streamer(withToken(ctx, tok), desc, cc, method, opts...)
	if err != nil {
		c.auth.rejected(err, tok)
		c.health.observe(err, "")
		return nil, err
	}
	return &checkedStream{ClientStream: s, c: c, tok: tok}, nil
}

type checkedStream struct {
	grpc.ClientStream
	c   *Client
	tok string
	key atomic.Value // string: the key of the last watch created
}

func (s *checkedStream) SendMsg(m any) error {
	if wr, ok := m.(*pb.WatchRequest); ok {
		if cr := wr.GetCreateRequest(); cr != nil {
			s.key.Store(string(cr.Key))
		}
	}
	return s.ClientStream.SendMsg(m)
}

func (s *checkedStream) lastKey() string {
	k, _ := s.key.Load().(string)
	return k
}

// requestKey is the key a KV request is about ("" when none).
func requestKey(req any) string {
	switch r := req.(type) {
	case *pb.RangeRequest:
		return string(r.Key)
	case *pb.PutRequest:
		return string(r.Key)
	case *pb.DeleteRangeRequest:
		return string(r.Key)
	case *pb.TxnRequest:
		for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				switch o := op.Request.(type) {
				case *pb.RequestOp_RequestPut:
					return string(o.RequestPut.Key)
				case *pb.RequestOp_RequestRange:
					return string(o.RequestRange.Key)
				case *pb.RequestOp_RequestDeleteRange:
					return string(o.RequestDeleteRange.Key)
				}
			}
		}
		for _, cmp := range r.Compare {
			return string(cmp.Key)
		}
	}
	return ""
}

func (s *checkedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.c.auth.rejected(err, s.tok)
			s.c.health.observe(err, "")
		}
		return err
	}
	if wr, ok := m.(*pb.WatchResponse); ok && wr.Canceled {
		// etcd refuses a watch by cancelling it with the error's text.
		if i := strings.Index(wr.CancelReason, "etcdserver: "); i >= 0 {
			werr := rpctypes.Error(errors.New(wr.CancelReason[i:]))
			s.c.auth.rejected(werr, s.tok)
			s.c.health.observe(werr, s.lastKey())
			return nil
		}
	}
	s.c.health.observe(nil, "")
	return nil
}
