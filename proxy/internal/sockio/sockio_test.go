package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair returns a wrapped client connection and the server side of a
// loopback TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	w, ok := Wrap(c).(*Conn)
	if !ok {
		t.Fatalf("Wrap(%T) is %T, want *Conn", c, Wrap(c))
	}
	t.Cleanup(func() { w.Close(); s.Close() })
	return w, s
}

func TestReadWriteEOF(t *testing.T) {
	c, s := pair(t)
	if n, err := c.Write([]byte("ping")); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("peer read %q, %v", buf, err)
	}
	if _, err := s.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(buf[:0]); n != 0 || err != nil {
		t.Fatalf("zero-length Read = %d, %v; want 0, nil", n, err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("Read %q, %v", buf, err)
	}
	s.Close()
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read after peer close = %d, %v; want 0, EOF", n, err)
	}
}

// A write larger than both socket buffers waits for the peer to read and
// delivers every byte in order.
func TestLargeWriteWaitsForPeer(t *testing.T) {
	c, s := pair(t)
	want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(s)
		got <- b
	}()
	if n, err := c.Write(want); n != len(want) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	c.CloseWrite()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer got %d bytes, want %d identical ones", len(b), len(want))
	}
}

func TestReadDeadline(t *testing.T) {
	c, _ := pair(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past deadline: %v; want a timeout", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("error %v: want a *net.OpError with Op read", err)
	}
}

// A deadline that passes during a blocked Write ends it with what it wrote
// and a timeout. The deadline is set once the peer has received a byte of
// the Write (it then reads no more: the buffers stay full), not before the
// Write: a goroutine stalled past a deadline set before it wrote anything
// writes nothing (seen under load, n = 0).
func TestWriteDeadline(t *testing.T) {
	c, s := pair(t)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := c.Write(make([]byte, 64<<20)) // far more than the socket buffers hold
		done <- result{n, err}
	}()
	s.SetReadDeadline(time.Now().Add(30 * time.Second)) // a safety net
	if _, err := s.Read(make([]byte, 1)); err != nil {
		t.Fatalf("peer read: %v", err)
	}
	c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	select {
	case r := <-done:
		if !errors.Is(r.err, os.ErrDeadlineExceeded) || r.n <= 0 || r.n >= 64<<20 {
			t.Fatalf("Write past deadline = %d, %v; want a partial write and a timeout", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Write did not return after its deadline")
	}
}

// Close from another goroutine ends a blocked Read with net.ErrClosed.
func TestCloseUnblocksRead(t *testing.T) {
	c, _ := pair(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.AfterFunc(10*time.Millisecond, func() { c.Close() })
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
	}
}

// Reads and writes run concurrently in both directions, as a WebSocket
// tunnel does, and several goroutines may write at once.
func TestConcurrentReadersAndWriters(t *testing.T) {
	c, s := pair(t)
	const writers, per = 4, 2000
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := c.Write([]byte("abcdefgh")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	echoed := make(chan int, 1)
	go func() { // the peer echoes everything back
		n, _ := io.Copy(s, s)
		echoed <- int(n)
	}()
	read := make(chan int, 1)
	go func() {
		buf := make([]byte, 1000)
		total := 0
		for total < writers*per*8 {
			n, err := c.Read(buf)
			for _, b := range buf[:n] {
				if b < 'a' || b > 'h' {
					t.Errorf("read byte %q", b)
				}
			}
			total += n
			if err != nil {
				break
			}
		}
		read <- total
	}()
	wg.Wait()
	if got := <-read; got != writers*per*8 {
		t.Fatalf("read back %d bytes, want %d", got, writers*per*8)
	}
	c.CloseWrite()
	if n := <-echoed; n != writers*per*8 {
		t.Fatalf("peer echoed %d bytes, want %d", n, writers*per*8)
	}
}

// WriteAwait returns once the answer is readable, and the next Read has it.
func TestWriteAwaitWaitsForTheAnswer(t *testing.T) {
	c, s := pair(t)
	answered := make(chan struct{})
	go func() {
		buf := make([]byte, len("request"))
		if _, err := io.ReadFull(s, buf); err != nil {
			return
		}
		time.Sleep(30 * time.Millisecond) // a backend that thinks: WriteAwait must not return meanwhile
		close(answered)
		s.Write([]byte("answer"))
	}()
	if n, err := c.WriteAwait([]byte("request")); n != len("request") || err != nil {
		t.Fatalf("WriteAwait = %d, %v", n, err)
	}
	select {
	case <-answered:
	default:
		t.Fatal("WriteAwait returned before the answer was sent")
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "answer" {
		t.Fatalf("Read after WriteAwait: %q, %v", buf, err)
	}
}

// A wait that ends at the read deadline leaves the timeout to the next Read;
// the write itself succeeded.
func TestWriteAwaitDeadlineLeftToRead(t *testing.T) {
	c, s := pair(t)
	go io.Copy(io.Discard, s)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := c.WriteAwait([]byte("request")); n != len("request") || err != nil {
		t.Fatalf("WriteAwait = %d, %v; want the write done", n, err)
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after an unanswered WriteAwait: %v, want a timeout", err)
	}
}

func TestWrapLeavesOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := Wrap(a); got != a {
		t.Fatalf("Wrap(pipe) = %T, want the pipe itself", got)
	}
	c, _ := pair(t)
	if got := Wrap(c); got != net.Conn(c) {
		t.Fatalf("Wrap(*Conn) = %T, want it unchanged", got)
	}
}

func TestListenerWraps(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := Listener{l}
	defer wl.Close()
	go func() {
		if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := wl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("accepted %T, want *Conn", c)
	}
}

// BenchmarkReadWrite is one 100-byte write and read over loopback, the
// shape of a proxied exchange, against net.TCPConn's own.
func BenchmarkReadWrite(b *testing.B) {
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"sockio", true}, {"net", false}} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			go func() {
				s, err := l.Accept()
				if err == nil {
					io.Copy(s, s)
					s.Close()
				}
			}()
			nc, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			c := nc
			if tc.wrap {
				c = Wrap(nc)
			}
			defer c.Close()
			msg, buf := make([]byte, 100), make([]byte, 100)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
