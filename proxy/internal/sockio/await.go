package sockio

import "syscall"

// AwaitReadable waits until a byte, the peer's end or a pending error is
// there to read, or the read deadline passes, and reads nothing: a parked
// keep-alive connection waits for its next request without a buffer (the
// server's fasthttp front). The first RawConn.Read callback peeks; after a
// wake-up the poller's readiness is the answer, without one more system
// call.
func (c *Conn) AwaitReadable() error {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.awaitReadFn == nil {
		c.awaitReadFn = c.awaitRead // made once per connection
	}
	c.woken = false
	c.drained.Store(false) // a RawConn.Read: readiness is cleared
	if err := c.rc.Read(c.awaitReadFn); err != nil {
		return c.fail("read", err, 0)
	}
	return nil
}

// awaitRead is AwaitReadable's RawConn.Read callback: false asks the poller
// to wait.
func (c *Conn) awaitRead(fd uintptr) bool {
	if c.woken {
		return true
	}
	c.woken = true
	for {
		_, errno := rawPeek(fd, &c.peekByte)
		if errno == syscall.EINTR {
			continue
		}
		return errno != syscall.EAGAIN
	}
}
