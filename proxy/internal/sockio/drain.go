package sockio

// Waiting for the next request without the read that finds nothing.
//
// A keep-alive server reads a request, answers it, then reads again for the
// next one: that read finds nothing (EAGAIN) and only then waits in the
// poller, and the read after the wake-up gets the request. nginx makes one
// read per request: its readiness flag is set by epoll's edge-triggered
// events and cleared by a short read, so after a short read it waits in
// epoll at once. Go's poller clears readiness at the start of every
// RawConn.Read (prepareRead), before the callback runs, so a wait begun by
// a new RawConn.Read could miss bytes whose event the poller took before
// that clear — the next request sent while the answer was being made.
//
// AwaitAfterDrain waits without that clear (the runtime's pollWait, which
// internal/poll's waitRead is), and only right after a Read whose last read
// system call was short (it left nothing in the socket) with no other
// RawConn.Read since. Then no byte can be missed: the Read's RawConn.Read
// cleared readiness before its read system call; every byte there when
// that call ran was read (a short read drains a TCP socket); so every byte
// still unread arrived after the call began, and its edge-triggered event
// reaches the poller after the clear, making the descriptor ready (or
// waking the wait). An event for bytes already read only ends the wait
// early, and the Read after it finds nothing and waits as before: never
// a wait too long, at worst today's read. Deadlines and Close end the
// wait as they end a Read. The one thing the short read does not drain is
// a FIN read together with the last bytes (and TCP urgent data): its event
// may have been taken before the clear, so the wait lasts until the read
// deadline or a kick (the fasthttp front's idle sweep, idlepark.go) — the
// connection's end is seen that much later, never lost.

// AwaitAfterDrain waits, reading nothing, until the socket may have
// something to read, if the last Read left it empty (a short read, no
// other RawConn.Read since), and reports whether it waited; otherwise, or
// where the runtime's wait is not reachable (pollWaitOK), it returns false
// at once. The caller's next Read then reads (or reports the deadline or
// the close) as usual.
func (c *Conn) AwaitAfterDrain() bool {
	if !pollWaitOK || !c.drained.Load() {
		return false
	}
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if !c.drained.Load() {
		return false
	}
	if c.pollWaitFn == nil {
		c.pollWaitFn = c.pollWait // made on first use: busy keep-alive connections only
	}
	// Control holds a reference on the descriptor for the wait: a Close
	// meanwhile ends the wait (the poller's evict) and then waits for it.
	_ = c.rc.Control(c.pollWaitFn)
	return true
}

// pollWait is AwaitAfterDrain's RawConn.Control callback.
func (c *Conn) pollWait(uintptr) {
	if ctx := pollCtx(c.TCPConn); ctx != 0 {
		_ = runtimePollWait(ctx, 'r')
	}
}
