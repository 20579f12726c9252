package sockio

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestAwaitReadable: it waits for a byte without taking it, times out at
// the read deadline, and answers the peer's end.
func TestAwaitReadable(t *testing.T) {
	c, peer := pair(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	err := c.AwaitReadable()
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("await with nothing sent: %v, want a read timeout", err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	done := make(chan error, 1)
	go func() { done <- c.AwaitReadable() }()
	if _, err := peer.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("await with a byte sent: %v", err)
	}
	b := make([]byte, 4)
	if n, err := c.Read(b); n != 1 || b[0] != 'x' || err != nil {
		t.Fatalf("read after await: %d %q %v, want the byte still there", n, b[:n], err)
	}
	peer.Close()
	if err := c.AwaitReadable(); err != nil {
		t.Fatalf("await after the peer closed: %v, want readable", err)
	}
	if _, err := c.Read(b); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}
