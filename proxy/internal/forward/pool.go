package forward

import (
	"bufio"
	"context"
	"sync"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/sockio"
)

// getConn returns the most recently used idle connection that is not past
// the idle timeout and still open (see usable), or dials a new one (failures
// are *DialError).
func (u *Upstream) getConn(ctx context.Context, now time.Time) (*conn, error) {
	for {
		u.idleMu.Lock()
		n := len(u.idle)
		if n == 0 {
			u.idleMu.Unlock()
			break
		}
		c := u.idle[n-1]
		u.idle[n-1] = nil
		u.idle = u.idle[:n-1]
		u.idleMu.Unlock()
		if (u.idleTimeout > 0 && now.Sub(c.idleAt) >= u.idleTimeout) || !c.usable() {
			c.close()
			continue
		}
		c.attach()
		return c, nil
	}
	dctx := ctx
	if u.connect > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, u.connect)
		defer cancel()
	}
	start := time.Now()
	nc, err := u.dial(dctx, "tcp", u.hostPort)
	if err != nil {
		return nil, &DialError{Err: err}
	}
	c := &conn{nc: sockio.Wrap(nc), u: u, dialed: time.Since(start)}
	c.interrupt = func() { c.nc.SetDeadline(aLongTimeAgo) }
	c.attach()
	return c, nil
}

// An idle pooled connection holds no buffers: putIdle hands its 4 KiB reader
// and writer back to these pools and getConn takes a pair for the exchange.
// With many backends (a pool of 1 000 instances has a connection or more per
// instance, each used every few hundred milliseconds) the exchange then works
// in buffers the last exchanges warmed rather than in ones idle since the
// instance's last request, and an idle upstream connection costs 8 KiB less.
var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

// attach gives c a reader and a writer for an exchange.
func (c *conn) attach() {
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c.nc)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(sockWriter{c})
}

// detach returns c's buffers; c is between exchanges (its reader empty, its
// writer flushed: putIdle's callers check).
func (c *conn) detach() {
	c.br.Reset(nil)
	readers.Put(c.br)
	c.bw.Reset(nil)
	writers.Put(c.bw)
	c.br, c.bw = nil, nil
}

// usable reports whether an idle connection can carry a request: the
// backend neither closed nor half-closed nor reset it, nor sent anything,
// since its last answer (sockio.Conn.Idle: one non-blocking peek, the
// check http.Transport's background read makes). A connection sockio did not
// wrap is not checked.
func (c *conn) usable() bool {
	sc, ok := c.nc.(*sockio.Conn)
	return !ok || sc.Idle() == nil
}

// putIdle keeps c for reuse, or closes it when the pool is full or released.
// Either way c's buffers go back to the shared pools.
func (u *Upstream) putIdle(c *conn) {
	c.detach()
	u.idleMu.Lock()
	defer u.idleMu.Unlock()
	if u.closed || len(u.idle) >= u.maxIdle {
		c.close()
		return
	}
	c.idleAt = time.Now()
	u.idle = append(u.idle, c)
	if u.idleTimeout > 0 && u.reaperAt.IsZero() {
		u.armReaper(u.idleTimeout)
	}
}

// armReaper schedules reapIdle; idleMu is held. One timer per upstream, no
// goroutine until it fires.
func (u *Upstream) armReaper(d time.Duration) {
	u.reaperAt = time.Now().Add(d)
	if u.reaper == nil {
		u.reaper = time.AfterFunc(d, u.reapIdle)
	} else {
		u.reaper.Reset(d)
	}
}

// reapIdle closes the connections idle for the idle timeout and re-arms for
// the oldest remaining one.
func (u *Upstream) reapIdle() {
	u.idleMu.Lock()
	defer u.idleMu.Unlock()
	u.reaperAt = time.Time{}
	if u.closed {
		return
	}
	now := time.Now()
	i := 0
	for ; i < len(u.idle) && now.Sub(u.idle[i].idleAt) >= u.idleTimeout; i++ {
		u.idle[i].close()
		u.idle[i] = nil
	}
	u.idle = append(u.idle[:0], u.idle[i:]...)
	if len(u.idle) > 0 {
		u.armReaper(u.idleTimeout - now.Sub(u.idle[0].idleAt))
	}
}

// closeIdle closes every idle connection and makes connections returned
// later close instead of pooling.
func (u *Upstream) closeIdle() {
	u.idleMu.Lock()
	defer u.idleMu.Unlock()
	u.closed = true
	for i, c := range u.idle {
		c.close()
		u.idle[i] = nil
	}
	u.idle = u.idle[:0]
	if u.reaper != nil {
		u.reaper.Stop()
	}
	u.reaperAt = time.Time{}
}

// IdleConns is the number of idle pooled connections of Do (for tests and
// metrics).
func (u *Upstream) IdleConns() int {
	u.idleMu.Lock()
	defer u.idleMu.Unlock()
	return len(u.idle)
}
