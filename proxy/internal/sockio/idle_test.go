package sockio

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// Idle tells a usable idle connection from one the peer closed, half-closed
// or reset, or wrote to unasked — without consuming a byte or waiting, and
// whatever the read deadline.
func TestIdle(t *testing.T) {
	wait := func(t *testing.T, c *Conn, want func(error) bool) error {
		t.Helper()
		// The peer's FIN or RST crosses loopback asynchronously.
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := c.Idle()
			if want(err) || time.Now().After(deadline) {
				return err
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Run("open", func(t *testing.T) {
		c, _ := pair(t)
		c.SetReadDeadline(time.Unix(1, 0)) // expired: Idle must not care
		if err := c.Idle(); err != nil {
			t.Fatalf("Idle on an open connection = %v, want nil", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		c, s := pair(t)
		s.Close()
		if err := wait(t, c, func(err error) bool { return err != nil }); err != io.EOF {
			t.Fatalf("Idle after the peer's close = %v, want io.EOF", err)
		}
	})
	t.Run("half-closed", func(t *testing.T) {
		c, s := pair(t)
		s.(*net.TCPConn).CloseWrite()
		if err := wait(t, c, func(err error) bool { return err != nil }); err != io.EOF {
			t.Fatalf("Idle after the peer's CloseWrite = %v, want io.EOF", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		c, s := pair(t)
		s.(*net.TCPConn).SetLinger(0)
		s.Close()
		err := wait(t, c, func(err error) bool { return err != nil })
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("Idle after the peer's reset = %v, want ECONNRESET", err)
		}
	})
	t.Run("unsolicited", func(t *testing.T) {
		c, s := pair(t)
		s.Write([]byte("x"))
		if err := wait(t, c, func(err error) bool { return err != nil }); err != ErrUnsolicited {
			t.Fatalf("Idle with a byte waiting = %v, want ErrUnsolicited", err)
		}
		b := make([]byte, 1)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(b); n != 1 || b[0] != 'x' || err != nil {
			t.Fatalf("Read after Idle = %d %q %v: the byte was consumed", n, b, err)
		}
	})
	t.Run("allocs", func(t *testing.T) {
		c, _ := pair(t)
		if n := testing.AllocsPerRun(100, func() { c.Idle() }); n != 0 {
			t.Fatalf("Idle allocates %.1f times, want 0", n)
		}
	})
}
