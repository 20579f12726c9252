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
	var b [1]byte
	var rerr error
	woken := false
	err := c.raw.Read(func(fd uintptr) bool {
		if woken {
			// The poller saw the socket readable (data, end or error):
			// fasthttp's read finds out which, without one more syscall.
			return true
		}
		woken = true
		for {
			n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
			switch {
			case errors.Is(e, syscall.EINTR):
				continue
			case errors.Is(e, syscall.EAGAIN):
				return false
			case e != nil:
				rerr = e
			case n == 0:
				rerr = io.EOF
			}
			return true
		}
	})
	if err != nil {
		return err
	}
	return rerr
}
