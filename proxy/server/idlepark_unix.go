//go:build unix

package server

import (
	"errors"
	"io"
	"syscall"
	"time"
)

const canPark = true

// waitReadable waits until c has a byte to read, or is closed, or idle
// passes (os.ErrDeadlineExceeded), without reading: MSG_PEEK asks the socket,
// the runtime's poller waits.
func waitReadable(c *addrConn, idle time.Duration) error {
	if idle > 0 {
		if err := c.SetReadDeadline(time.Now().Add(idle)); err != nil {
			return err
		}
	}
	if c.peek == nil {
		c.peek = c.peekReadable // once per connection: no allocation per request
	}
	c.woken, c.peekErr = false, nil
	err := c.raw.Read(c.peek)
	if err != nil {
		return err
	}
	return c.peekErr
}

// peekReadable is the raw read callback of waitReadable: false (wait) while
// the socket has nothing, true with c.peekErr set at its end or on an error.
func (c *addrConn) peekReadable(fd uintptr) bool {
	if c.woken {
		// The poller saw the socket readable (data, end or error):
		// fasthttp's read finds out which, without one more syscall.
		return true
	}
	c.woken = true
	for {
		n, _, e := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK)
		switch {
		case errors.Is(e, syscall.EINTR):
			continue
		case errors.Is(e, syscall.EAGAIN):
			return false
		case e != nil:
			c.peekErr = e
		case n == 0:
			c.peekErr = io.EOF
		}
		return true
	}
}
