package forward

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/sockio"
	"github.com/sluicelb/sluice/testkit/poll"
)

// The std upstream's check of a reused connection, without the Transport's
// timing in the way: once the backend has closed the connection, the
// request's first write sends nothing and answers ErrBackendGone, and
// classify makes that an Unsent StaleConnError (the attempt loop may try a
// POST again); a connection the backend keeps open writes as usual, and a
// connection taken new is not checked.
func TestGotConnFindsTheBackendGone(t *testing.T) {
	pair := func(t *testing.T) (*countConn, net.Conn) {
		t.Helper()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); s.Close() })
		return &countConn{Conn: sockio.Wrap(c)}, s
	}
	t.Run("closed before reuse", func(t *testing.T) {
		cc, backend := pair(t)
		backend.Close()
		poll.EventuallyTrue(t, 10*time.Second, "the FIN arrived", func() bool { return cc.Conn.(*sockio.Conn).Gone() != nil })
		ct := &connTrace{}
		ct.gotConn(httptrace.GotConnInfo{Conn: cc, Reused: true})
		n, err := cc.Write([]byte("POST / HTTP/1.1\r\n"))
		if n != 0 || !errors.Is(err, ErrBackendGone) {
			t.Fatalf("write on the closed connection = %d, %v; want 0, ErrBackendGone", n, err)
		}
		var se *StaleConnError
		if err := ct.classify(context.Background(), err); !errors.As(err, &se) || !se.Unsent {
			t.Fatalf("classify = %v, want an Unsent StaleConnError", err)
		}
	})
	t.Run("closed after it was taken, before the first write", func(t *testing.T) {
		cc, backend := pair(t)
		ct := &connTrace{}
		ct.gotConn(httptrace.GotConnInfo{Conn: cc, Reused: true})
		backend.Close()
		poll.EventuallyTrue(t, 10*time.Second, "the FIN arrived", func() bool { return cc.Conn.(*sockio.Conn).Gone() != nil })
		if n, err := cc.Write([]byte("GET / HTTP/1.1\r\n")); n != 0 || !errors.Is(err, ErrBackendGone) {
			t.Fatalf("first write = %d, %v; want 0, ErrBackendGone (checked again at the write)", n, err)
		}
	})
	t.Run("open", func(t *testing.T) {
		cc, backend := pair(t)
		ct := &connTrace{}
		ct.gotConn(httptrace.GotConnInfo{Conn: cc, Reused: true})
		msg := []byte("GET / HTTP/1.1\r\n")
		if n, err := cc.Write(msg); n != len(msg) || err != nil {
			t.Fatalf("write on an open connection = %d, %v", n, err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(backend, got); err != nil || string(got) != string(msg) {
			t.Fatalf("the backend read %q, %v", got, err)
		}
	})
	t.Run("new connection not checked", func(t *testing.T) {
		cc, backend := pair(t)
		backend.Close()
		poll.EventuallyTrue(t, 10*time.Second, "the FIN arrived", func() bool { return cc.Conn.(*sockio.Conn).Gone() != nil })
		ct := &connTrace{}
		ct.gotConn(httptrace.GotConnInfo{Conn: cc, Reused: false})
		if _, err := cc.Write([]byte("x")); errors.Is(err, ErrBackendGone) {
			t.Fatal("a connection taken new was refused: only reused ones are checked")
		}
	})
}
