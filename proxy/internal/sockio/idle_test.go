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

// Gone answers while another goroutine waits in Read on the same
// connection (http.Transport's background read on an idle connection):
// nil while the peer is open, io.EOF once it closed, and still io.EOF
// after that Read has taken the FIN.
func TestGoneWithAReadPending(t *testing.T) {
	c, s := pair(t)
	read := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := c.Read(b[:])
		read <- err
	}()
	for i := 0; i < 100; i++ { // while the Read waits (it cannot have finished: nothing was sent)
		if err := c.Gone(); err != nil {
			t.Fatalf("Gone on an open connection with a Read pending = %v, want nil", err)
		}
	}
	s.Close()
	if err := <-read; err != io.EOF {
		t.Fatalf("the pending Read = %v, want io.EOF", err)
	}
	if err := c.Gone(); err != io.EOF {
		t.Fatalf("Gone after the peer's close, its FIN taken by Read = %v, want io.EOF", err)
	}
}
