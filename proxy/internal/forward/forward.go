// Package forward owns the connections from the proxy to its backends: one
// Upstream per backend address and pool policy, holding the pool of the
// HTTP/1.1 client of Do (h1.go, pool.go) and an http.Transport for
// RoundTrip (upgrades, the std upstream), with a cap on concurrent requests
// per backend and a bounded wait for a free slot.
//
// Pools outlive snapshot swaps: a new table that keeps an address with the same
// policy keeps its warm keep-alive connections (D8). Addresses no table uses
// any more are released by Retain; their idle connections are closed and busy
// ones finish their requests first.
//
// Every method is safe for concurrent use.
package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/sockio"
)

// ErrPoolFull is returned when a backend's connection cap stayed reached for
// the whole queue timeout. It is back-pressure from this proxy, not a backend
// failure (balance.LocalLimit).
var ErrPoolFull = errors.New("forward: backend connection limit reached")

// DialError wraps a failure to connect: nothing was sent, so a retry is always
// safe.
type DialError struct{ Err error }

func (e *DialError) Error() string { return "dial backend: " + e.Err.Error() }
func (e *DialError) Unwrap() error { return e.Err }

// Options configure Pools.
type Options struct {
	// DialContext connects to a backend; nil means a net.Dialer with TCP
	// keep-alive. Tests inject failures here.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

type key struct {
	addr           netip.AddrPort
	pool           config.Pool
	connect        time.Duration
	responseHeader time.Duration
}

// Pools maps backend addresses to upstreams.
type Pools struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	mu   sync.RWMutex
	m    map[key]*Upstream
}

// NewPools returns an empty set of pools.
func NewPools(o Options) *Pools {
	d := o.DialContext
	if d == nil {
		d = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	return &Pools{dial: d, m: make(map[key]*Upstream)}
}

// Get returns the upstream for addr under the given policy, creating it on
// first use. Two policies for one address get two pools.
func (p *Pools) Get(addr netip.AddrPort, pool config.Pool, t config.Timeouts) *Upstream {
	k := key{addr: addr, pool: pool, connect: t.Connect.D(), responseHeader: t.ResponseHeader.D()}
	p.mu.RLock()
	u := p.m[k]
	p.mu.RUnlock()
	if u != nil {
		return u
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if u = p.m[k]; u == nil {
		u = p.newUpstream(k)
		p.m[k] = u
	}
	return u
}

// Cached is Get through slot, a per-address cache (balance.Endpoint.Slot):
// the upstream slot holds is returned while it is still the pool's for the
// same address and policy (not released by Retain), else Get's, which slot
// then keeps. A request then reaches its pool without hashing the 72-byte
// key into a map of every address; the answer is Get's in every case.
func (p *Pools) Cached(slot *atomic.Value, addr netip.AddrPort, pool config.Pool, t config.Timeouts) *Upstream {
	k := key{addr: addr, pool: pool, connect: t.Connect.D(), responseHeader: t.ResponseHeader.D()}
	if u, ok := slot.Load().(*Upstream); ok && u.k == k && !u.released.Load() {
		return u
	}
	u := p.Get(addr, pool, t)
	slot.Store(u)
	return u
}

func (p *Pools) newUpstream(k key) *Upstream {
	connect := k.connect
	dial := p.dial
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if connect > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, connect)
				defer cancel()
			}
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, &DialError{Err: err}
			}
			return &countConn{Conn: sockio.Wrap(c)}, nil
		},
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   k.pool.MaxIdleConnsPerHost,
		MaxConnsPerHost:       k.pool.MaxConnsPerHost,
		IdleConnTimeout:       k.pool.IdleTimeout.D(),
		ResponseHeaderTimeout: k.responseHeader,
		DisableKeepAlives:     k.pool.MaxIdleConnsPerHost == 0,
		// Bodies pass through as the backend sent them.
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       8 << 10,
		ReadBufferSize:        8 << 10,
	}
	u := &Upstream{k: k, hostPort: k.addr.String(), transport: tr, queueTimeout: k.pool.QueueTimeout.D(),
		dial: dial, connect: connect, rht: k.responseHeader, maxIdle: k.pool.MaxIdleConnsPerHost,
		idleTimeout: k.pool.IdleTimeout.D(), noKeepAlive: k.pool.MaxIdleConnsPerHost == 0}
	if k.pool.MaxConnsPerHost > 0 {
		u.slots = make(chan struct{}, k.pool.MaxConnsPerHost)
	}
	return u
}

// Retain keeps the upstreams whose address keep reports true and releases the
// rest: their idle connections are closed now, busy ones when their request
// ends (the transport closes a connection returned to a closed pool).
func (p *Pools) Retain(keep func(netip.AddrPort) bool) {
	p.mu.Lock()
	var drop []*Upstream
	for k, u := range p.m {
		if !keep(k.addr) {
			u.released.Store(true) // before it leaves the map: Cached stops returning it
			drop = append(drop, u)
			delete(p.m, k)
		}
	}
	p.mu.Unlock()
	for _, u := range drop {
		u.transport.CloseIdleConnections()
		u.closeIdle()
	}
}

// Len is the number of live upstreams (for tests and metrics).
func (p *Pools) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.m)
}

// Close closes every idle connection and forgets every upstream.
func (p *Pools) Close() { p.Retain(func(netip.AddrPort) bool { return false }) }

// Upstream is the pool of one backend address. It is an http.RoundTripper.
type Upstream struct {
	// What a request at 1 000 instances reads first, on one pair of cache
	// lines (the struct fits the 256-byte size class, so it starts on a
	// line): Cached's key check, then getConn's idle list. The pool was used last ~1 000 requests ago, so
	// every line of it a request touches is a likely miss.
	k           key         // its key in Pools (Cached compares it)
	released    atomic.Bool // Retain took it out of Pools
	closed      bool        // idle connections are closed, not pooled (idleMu)
	idleMu      sync.Mutex
	idle        []*conn       // oldest first; Do takes the newest
	idleTimeout time.Duration // idle connections closed after (0: never)

	hostPort     string
	transport    *http.Transport
	slots        chan struct{} // nil: no cap
	queueTimeout time.Duration

	// The HTTP/1.1 client of Do (h1.go, pool.go).
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	connect     time.Duration // dial timeout (0: none)
	rht         time.Duration // response-header timeout (0: none)
	maxIdle     int           // idle connections kept (0: no keep-alive)
	noKeepAlive bool
	reaper      *time.Timer
	reaperAt    time.Time // when the reaper fires (zero: not armed)
}

// Addr is the backend address.
func (u *Upstream) Addr() netip.AddrPort { return u.k.addr }

// RoundTrip sends req to the backend. Over the connection cap it waits up to
// the queue timeout for a slot and then fails with ErrPoolFull. A slot is held
// until the response body is closed. Like any RoundTripper it closes req.Body.
//
// It never resends: a failure on a reused keep-alive connection before any
// answer byte is a *StaleConnError for the caller's attempt loop to decide
// on (transportRequest says how the Transport's own resends are disabled).
// A reused connection found closed when taken is not such a failure: as
// Do's getConn, RoundTrip drops it and takes another or dials (see
// roundTrip).
func (u *Upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.slots == nil {
		return u.roundTrip(req)
	}
	if err := u.acquire(req.Context()); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	res, err := u.roundTrip(req)
	if err != nil {
		u.release()
		return nil, err
	}
	if rwc, ok := res.Body.(io.ReadWriteCloser); ok && res.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection: keep Write visible to ReverseProxy.
		res.Body = &slotConn{ReadWriteCloser: rwc, u: u}
		return res, nil
	}
	res.Body = &slotBody{ReadCloser: res.Body, u: u}
	return res, nil
}

func (u *Upstream) roundTrip(req *http.Request) (*http.Response, error) {
	if isUpgrade(req) {
		// An upgrade's connection is handed over whole; net/http never
		// resends it on another (and its body must stay NoBody).
		return u.transport.RoundTrip(req)
	}
	for {
		r, ct := transportRequest(req)
		res, err := u.transport.RoundTrip(r)
		if err == nil {
			return res, nil
		}
		// The check of the reused connection found the backend gone and not
		// a byte of the request was written: the Transport closed that
		// connection, so the next try takes another idle one or dials, as
		// Do's getConn does with an idle connection that is not usable. It
		// is not a resend: the backend saw nothing. Each try drops one
		// connection the backend had closed, so the loop ends.
		if !ct.foundGone() || req.Context().Err() != nil {
			return nil, ct.classify(req.Context(), err)
		}
		again, ok := withBodyAgain(req)
		if !ok {
			return nil, ct.classify(req.Context(), err)
		}
		req = again
	}
}

// withBodyAgain is req for another try after a connection found gone: req
// itself without a body (transportRequest gives each try its own empty
// one), a copy with the body from GetBody with one; ok is false without
// GetBody or when it fails (the body cannot be given again).
func withBodyAgain(req *http.Request) (*http.Request, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	r := req.WithContext(req.Context())
	r.Body = b
	return r, true
}

func isUpgrade(req *http.Request) bool {
	return req.Header.Get("Upgrade") != ""
}

func (u *Upstream) acquire(ctx context.Context) error {
	select {
	case u.slots <- struct{}{}:
		return nil
	default:
	}
	if u.queueTimeout <= 0 {
		return fmt.Errorf("%w (%d, no queue)", ErrPoolFull, cap(u.slots))
	}
	t := time.NewTimer(u.queueTimeout)
	defer t.Stop()
	select {
	case u.slots <- struct{}{}:
		return nil
	case <-t.C:
		return fmt.Errorf("%w (%d) for %s", ErrPoolFull, cap(u.slots), u.queueTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (u *Upstream) release() { <-u.slots }

func (u *Upstream) releaseSlot() {
	if u.slots != nil {
		<-u.slots
	}
}

// InUse is the number of held slots (0 without a cap).
func (u *Upstream) InUse() int { return len(u.slots) }

type slotBody struct {
	io.ReadCloser
	u    *Upstream
	once sync.Once
}

func (b *slotBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.u.release)
	return err
}

type slotConn struct {
	io.ReadWriteCloser
	u    *Upstream
	once sync.Once
}

func (b *slotConn) Close() error {
	err := b.ReadWriteCloser.Close()
	b.once.Do(b.u.release)
	return err
}

// HostPort is Addr formatted for a URL ("10.0.0.1:80", "[::1]:80").
func (u *Upstream) HostPort() string { return u.hostPort }
