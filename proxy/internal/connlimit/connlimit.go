// Package connlimit bounds the client connections a proxy keeps open (issue
// 23): a total (--max-client-conns) and one per client IP
// (--max-client-conns-per-ip), so that many idle keep-alive connections
// cannot exhaust the process's file descriptors (slowloris by keep-alive).
//
// A Limiter wraps the client listeners. Every accepted connection is
// counted, in total and by its socket's peer IP (not X-Forwarded-For), until
// it closes. The fronts tell it which connections are idle (Conn.Idle,
// Conn.Busy: waiting for a request — the first one, TLS handshake included,
// or the next on a keep-alive connection — or serving one); idle ones are
// kept in an intrusive list ordered by when they went idle. When an accept
// would exceed the total, the connection idle the longest is closed first
// (nginx closes its "reusable" connections the same way when
// worker_connections run out); only when none is idle is the new one
// refused. Over the per-IP limit the new connection is refused, as nginx's
// limit_conn and HAProxy's per-source limits do: evicting that IP's own idle
// connections would let one client churn them. A refused connection is
// closed right after its accept, without an answer.
//
// Cost: one mutex per accept and close. With a total limit the idle and
// busy transitions (twice per request) take no shared lock: the idle list
// is striped — each connection belongs to one of `stripes` lists, dealt
// round-robin at accept, each with its own mutex — and an idle connection
// carries a stamp from one atomic counter, so the oldest idle one overall is
// the oldest of the stripes' heads (an eviction, at the limit only, looks at
// every stripe). No allocation but the accepted connection's wrapper.
package connlimit

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/logrepeat"
)

// Options configure a Limiter.
type Options struct {
	// Max bounds the open client connections; ≤ 0: no bound.
	Max int
	// PerIP bounds the open client connections of one peer IP; ≤ 0: no bound.
	PerIP int
	// Logger receives the refusal and eviction warnings, identical lines at
	// most once per LogWindow (logrepeat); nil discards them.
	Logger *slog.Logger
	// LogWindow of the warnings; 0: logrepeat.DefaultWindow.
	LogWindow time.Duration
	// MaxFlag and PerIPFlag name the settings in the warnings
	// ("--max-client-conns", "--max-client-conns-per-ip" by default).
	MaxFlag, PerIPFlag string
}

// Limiter counts client connections and enforces Options' limits. Its
// methods are safe for concurrent use.
type Limiter struct {
	max, perIP       int
	log              *slog.Logger
	maxFlag, ipFlag  string
	rejMax, rejPerIP atomic.Uint64
	evicted          atomic.Uint64

	mu    sync.Mutex // open, ips, deal; taken before any stripe's
	open  int
	ips   map[netip.Addr]int // only with a per-IP limit
	deal  uint32             // the stripe of the next admitted connection
	stamp atomic.Uint64      // the last idle stamp handed out
	st    [stripes]stripe
}

// stripes is the number of idle lists: a transition locks one, so
// connections served on different cores rarely wait for each other.
const stripes = 16

// stripe is one idle list, ordered by when its connections went idle.
type stripe struct {
	mu   sync.Mutex
	n    int  // in the list
	idle Conn // the sentinel: idle.next is the oldest
	_    [64]byte
}

// New returns a Limiter with the limits of o.
func New(o Options) *Limiter {
	l := &Limiter{max: max(o.Max, 0), perIP: max(o.PerIP, 0), maxFlag: o.MaxFlag, ipFlag: o.PerIPFlag}
	if l.maxFlag == "" {
		l.maxFlag = "--max-client-conns"
	}
	if l.ipFlag == "" {
		l.ipFlag = "--max-client-conns-per-ip"
	}
	if l.perIP > 0 {
		l.ips = make(map[netip.Addr]int)
	}
	for i := range l.st {
		st := &l.st[i]
		st.idle.prev, st.idle.next = &st.idle, &st.idle
	}
	if o.Logger != nil {
		l.log = slog.New(logrepeat.New(o.Logger.Handler(), o.LogWindow))
	}
	return l
}

// Max is the total limit (0: none).
func (l *Limiter) Max() int { return l.max }

// PerIP is the per-IP limit (0: none).
func (l *Limiter) PerIP() int { return l.perIP }

// Open is the number of client connections open now.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// IdleConns is the number of open client connections idle now.
func (l *Limiter) IdleConns() int {
	n := 0
	for i := range l.st {
		st := &l.st[i]
		st.mu.Lock()
		n += st.n
		st.mu.Unlock()
	}
	return n
}

// Reasons of a refusal (the metric's reason label).
const (
	ReasonMax   = "max"
	ReasonPerIP = "per_ip"
)

// Rejected is the number of connections refused for reason (ReasonMax or
// ReasonPerIP).
func (l *Limiter) Rejected(reason string) uint64 {
	if reason == ReasonPerIP {
		return l.rejPerIP.Load()
	}
	return l.rejMax.Load()
}

// Evicted is the number of idle connections closed to make room.
func (l *Limiter) Evicted() uint64 { return l.evicted.Load() }

// Listener returns ln with its connections counted: Accept answers only
// admitted connections (a *Conn, or a connection that also has
// AwaitReadable when the accepted one has), refused ones are closed.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := ln.l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// admit counts c, closing the oldest idle connection first when the total
// is reached, or closes c and answers nil when it is refused.
func (l *Limiter) admit(c net.Conn) net.Conn {
	var out net.Conn
	var lc *Conn
	if aw, ok := c.(awaiter); ok {
		ac := &awaitConn{w: aw}
		out, lc = ac, &ac.Conn
	} else {
		lc = new(Conn)
		out = lc
	}
	lc.Conn, lc.l, lc.ip = c, l, peerIP(c)
	l.mu.Lock()
	if l.perIP > 0 && l.ips[lc.ip] >= l.perIP {
		l.mu.Unlock()
		c.Close()
		l.warn("client connection refused: "+l.ipFlag+" reached", l.ipFlag, l.perIP)
		l.rejPerIP.Add(1) // after the warning: a count seen is a line written (tests)
		return nil
	}
	var victim *Conn
	if l.max > 0 && l.open >= l.max {
		if victim = l.takeOldestIdleLocked(); victim == nil {
			l.mu.Unlock()
			c.Close()
			l.warn("client connection refused: "+l.maxFlag+" reached and no connection is idle", l.maxFlag, l.max)
			l.rejMax.Add(1)
			return nil
		}
		l.uncountLocked(victim)
	}
	l.open++
	if l.perIP > 0 {
		l.ips[lc.ip]++
	}
	lc.st = &l.st[l.deal%stripes]
	l.deal++
	l.mu.Unlock()
	lc.Idle() // waiting for its first request
	if victim != nil {
		victim.Conn.Close()
		l.warn("idle client connection closed: "+l.maxFlag+" reached", l.maxFlag, l.max)
		l.evicted.Add(1)
	}
	return out
}

// takeOldestIdleLocked takes the connection idle the longest out of its
// list and marks it gone (l.mu held): the oldest of the stripes' heads,
// looked at with every stripe locked, so that none moves meanwhile. nil:
// none is idle.
func (l *Limiter) takeOldestIdleLocked() *Conn {
	for i := range l.st {
		l.st[i].mu.Lock()
	}
	var victim *Conn
	for i := range l.st {
		if h := l.st[i].idle.next; h != &l.st[i].idle && (victim == nil || h.since < victim.since) {
			victim = h
		}
	}
	if victim != nil {
		victim.gone = true
		victim.st.unlinkLocked(victim)
	}
	for i := range l.st {
		l.st[i].mu.Unlock()
	}
	return victim
}

func (l *Limiter) warn(msg, flag string, limit int) {
	if l.log != nil {
		l.log.Warn(msg, "flag", flag, "limit", limit)
	}
}

// uncountLocked takes c, gone already, out of the counts (l.mu held).
func (l *Limiter) uncountLocked(c *Conn) {
	l.open--
	if l.perIP > 0 {
		if n := l.ips[c.ip] - 1; n > 0 {
			l.ips[c.ip] = n
		} else {
			delete(l.ips, c.ip)
		}
	}
}

// pushLocked puts c at the list's end (the newest idle), stamped now.
func (st *stripe) pushLocked(c *Conn) {
	if c.gone || c.next != nil {
		return
	}
	c.since = c.l.stamp.Add(1)
	c.prev, c.next = st.idle.prev, &st.idle
	c.prev.next, st.idle.prev = c, c
	st.n++
}

func (st *stripe) unlinkLocked(c *Conn) {
	if c.next == nil {
		return
	}
	c.prev.next, c.next.prev = c.next, c.prev
	c.prev, c.next = nil, nil
	st.n--
}

func peerIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// Conn is an admitted client connection: Close uncounts it.
type Conn struct {
	net.Conn
	l          *Limiter
	ip         netip.Addr
	st         *stripe // its idle list, for its life
	prev, next *Conn   // in st's list (st.mu); nil: not idle
	since      uint64  // when it went idle: l.stamp's value then (st.mu)
	gone       bool    // uncounted: closed, or evicted (st.mu)
}

// Idle tells that c waits for its next request: it becomes the newest idle
// connection. A nil c (not limited) does nothing.
func (c *Conn) Idle() {
	if c == nil || c.l.max == 0 {
		return
	}
	c.st.mu.Lock()
	c.st.pushLocked(c)
	c.st.mu.Unlock()
}

// Busy tells that c serves a request: it is not evicted until Idle.
func (c *Conn) Busy() {
	if c == nil || c.l.max == 0 {
		return
	}
	c.st.mu.Lock()
	c.st.unlinkLocked(c)
	c.st.mu.Unlock()
}

// Close uncounts c and closes it.
func (c *Conn) Close() error {
	c.l.mu.Lock()
	c.st.mu.Lock()
	counted := !c.gone
	c.gone = true
	c.st.unlinkLocked(c)
	c.st.mu.Unlock()
	if counted {
		c.l.uncountLocked(c)
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes c when it can (net/http's lingering close), else
// closes it.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// NetConn is the accepted connection.
func (c *Conn) NetConn() net.Conn { return c.Conn }

func (c *Conn) limited() *Conn { return c }

// Of finds the Conn under c, unwrapping NetConn methods (crypto/tls and the
// fronts' wrappers have one); nil when c was not admitted by a Limiter.
func Of(c net.Conn) *Conn {
	for c != nil {
		switch x := c.(type) {
		case interface{ limited() *Conn }:
			return x.limited()
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// awaiter is a connection that waits for its next byte without a buffer
// (sockio.Conn): the fasthttp front parks such idle connections.
type awaiter interface{ AwaitReadable() error }

// awaitConn is a Conn over an awaiter, an awaiter itself.
type awaitConn struct {
	Conn
	w awaiter
}

func (c *awaitConn) AwaitReadable() error { return c.w.AwaitReadable() }
