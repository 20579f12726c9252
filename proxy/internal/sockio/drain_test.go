package sockio

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestPollWaitReachable: on Linux the runtime's wait and the poll
// descriptor are found (a Go release that moves them fails here, not by
// silently making one read more per request).
func TestPollWaitReachable(t *testing.T) {
	if !supported {
		t.Skip("no raw system calls on this platform")
	}
	if !pollWaitOK {
		t.Fatal("net.TCPConn's poll descriptor was not found")
	}
	c, _ := pair(t)
	var ctx uintptr
	if err := c.rc.Control(func(uintptr) { ctx = pollCtx(c.TCPConn) }); err != nil || ctx == 0 {
		t.Fatalf("poll descriptor %#x (%v), want one", ctx, err)
	}
}

// readWant reads one short read's bytes and wants them to be want.
func readWant(t *testing.T, c *Conn, want string) {
	t.Helper()
	b := make([]byte, 64)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != want {
		t.Fatalf("read %q %v, want %q", b[:n], err, want)
	}
}

// TestAwaitAfterDrainNeverMissesTheNextBytes: after a short read the peer's
// next bytes are sent at every moment — before the wait (with and without
// letting the poller take their event first), while it begins, while it
// waits — and the wait always ends with them there to read. A wait that
// cleared readiness first (as a new RawConn.Read does) hangs on the bytes
// whose event the poller took before: the read deadline fails it.
func TestAwaitAfterDrainNeverMissesTheNextBytes(t *testing.T) {
	c, peer := pair(t)
	if _, err := peer.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	readWant(t, c, "a")
	waited := 0
	for i := range 400 {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		sent := make(chan error, 1)
		send := func() { _, err := peer.Write([]byte("b")); sent <- err }
		switch mode := i % 4; mode {
		case 0: // before, and the poller's round (an idle P) takes the event
			send()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		case 1: // before, at once
			send()
		case 2: // around the wait's start
			go func() {
				for range rand.IntN(2000) {
					runtime.Gosched()
				}
				send()
			}()
		case 3: // during the wait
			go func() {
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
				send()
			}()
		}
		if c.AwaitAfterDrain() {
			waited++
		}
		readWant(t, c, "b")
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	if pollWaitOK && waited != 400 {
		t.Fatalf("waited after %d of 400 short reads, want all", waited)
	}
}

// TestAwaitAfterDrainOnlyAfterAShortRead: a read that filled its buffer may
// have left bytes whose event is gone, and another RawConn.Read clears
// readiness: no wait after either.
func TestAwaitAfterDrainOnlyAfterAShortRead(t *testing.T) {
	c, peer := pair(t)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if c.AwaitAfterDrain() {
		t.Fatal("waited before any read")
	}
	go peer.Write([]byte("abcdefgh"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	if c.AwaitAfterDrain() {
		t.Fatal("waited after a read that filled its buffer")
	}
	readWant(t, c, "efgh")
	if pollWaitOK && !c.drained.Load() {
		t.Fatal("a short read left drained unset")
	}
	go func() { // answers "q" with "r", as WriteAwait's users' peers do
		if _, err := io.ReadFull(peer, make([]byte, 1)); err == nil {
			peer.Write([]byte("r"))
		}
	}()
	if _, err := c.WriteAwait([]byte("q")); err != nil { // returns when "r" is there
		t.Fatal(err)
	}
	if c.AwaitAfterDrain() {
		t.Fatal("waited after WriteAwait")
	}
	readWant(t, c, "r")
}

// TestAwaitAfterDrainEnds: the read deadline, the peer's end and a Close
// end the wait, and the Read after it reports them.
func TestAwaitAfterDrainEnds(t *testing.T) {
	drainedPair := func(t *testing.T) (*Conn, net.Conn) {
		c, peer := pair(t)
		if _, err := peer.Write([]byte("a")); err != nil {
			t.Fatal(err)
		}
		readWant(t, c, "a")
		return c, peer
	}
	t.Run("deadline", func(t *testing.T) {
		c, _ := drainedPair(t)
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		c.AwaitAfterDrain()
		if _, err := c.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after the deadline: %v, want a timeout", err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		c, peer := drainedPair(t)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		go peer.Close()
		c.AwaitAfterDrain()
		if _, err := c.Read(make([]byte, 4)); err != io.EOF {
			t.Fatalf("read after the peer's close: %v, want EOF", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		c, _ := drainedPair(t)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		go c.Close()
		c.AwaitAfterDrain()
		if _, err := c.Read(make([]byte, 4)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after Close: %v, want net.ErrClosed", err)
		}
	})
}
