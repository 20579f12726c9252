package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/sluicelb/sluice/testkit/poll"
)

// The park sweep's tests (h2park.go): a sweep tick of 5 ms.
func parkTune(idle time.Duration) func(*h2Server) {
	return func(s *h2Server) {
		s.parkAfter = 5 * time.Millisecond
		if idle > 0 {
			s.idle = idle
		}
	}
}

// waitParked waits until hc is parked with crypto/tls's read buffers let go.
func waitParked(t *testing.T, hc *h2conn) {
	t.Helper()
	poll.EventuallyTrue(t, 10*time.Second, "the connection parked", hc.parkedNow.Load)
	hc.mu.Lock() // parked, crypto/tls's buffers are not touched (c.mu orders the reads of the next wake-up after)
	caps := tlsBufCaps(hc.tc)
	hc.mu.Unlock()
	if caps != [3]int{} {
		t.Fatalf("parked with crypto/tls buffers of %v bytes, want none", caps)
	}
}

// An idle connection is parked; it serves its next requests and PINGs as
// before and parks again.
func TestSluiceH2ParksIdleConnection(t *testing.T) {
	tf, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), parkTune(0))
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	if st, body := c.answer(1); st != 200 || body != "ok" {
		t.Fatalf("stream 1: %d %q", st, body)
	}
	hc := onlyConn(t, tf)
	for i, id := range []uint32{3, 5} {
		waitParked(t, hc)
		if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if p, ok := c.next().(*http2.PingFrame); !ok || !p.IsAck() || p.Data[0] != byte(i) {
			t.Fatalf("after park %d: %v, want the PING's ACK", i, p)
		}
		waitParked(t, hc)
		c.request(id, "GET", "/", true)
		if st, body := c.answer(id); st != 200 || body != "ok" {
			t.Fatalf("stream %d after a park: %d %q", id, st, body)
		}
	}
}

// A parked connection ends at the idle timeout with GOAWAY(NO_ERROR), as
// one that was not parked. (1 s: the test must see it parked, 5 ms after
// its answer, before the idle timeout closes it; 300 ms failed once at
// load 22.)
func TestSluiceH2ParkedIdleTimeout(t *testing.T) {
	tf, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), parkTune(time.Second))
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	if st, _ := c.answer(1); st != 200 {
		t.Fatalf("status %d", st)
	}
	waitParked(t, onlyConn(t, tf))
	if g := c.expectGoAway(); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR 1", g.ErrCode, g.LastStreamID)
	}
	if _, err := c.read(); err == nil {
		t.Fatal("the connection is still open after its idle GOAWAY")
	}
}

// Shutdown with a parked connection: GOAWAY, the connection ends, Shutdown
// returns nil.
func TestSluiceH2ParkedShutdown(t *testing.T) {
	tf, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), parkTune(0))
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	if st, _ := c.answer(1); st != 200 {
		t.Fatalf("status %d", st)
	}
	waitParked(t, onlyConn(t, tf))
	done := make(chan error, 1)
	go func() { done <- tf.Shutdown(context.Background()) }()
	if g := c.expectGoAway(); g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR 1", g.ErrCode, g.LastStreamID)
	}
	c.conn.Close()
	shutdownReturned(t, done)
}

// A TLS record half sent when the sweep kicks: the connection is not
// parked (crypto/tls holds part of the record), reads on under its
// deadline, and answers once the rest comes.
func TestSluiceH2KickDuringPartialRecord(t *testing.T) {
	tf, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), parkTune(0))
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sc := &splitConn{Conn: raw}
	c := dialH2Over(t, sc, pool)
	c.request(1, "GET", "/", true)
	if st, _ := c.answer(1); st != 200 {
		t.Fatalf("status %d", st)
	}
	hc := onlyConn(t, tf)
	waitParked(t, hc)
	sc.split(5) // the PING's record: its header now, the rest when released
	wrote := make(chan error, 1)
	kicks := tf.h2s.kicks.Load()
	go func() { wrote <- c.fr.WritePing(false, [8]byte{7}) }()
	// Kicks come only while the connection reads (not parked): the record's
	// head woke it.
	poll.EventuallyTrue(t, 10*time.Second, "two kicks during the record", func() bool { return tf.h2s.kicks.Load() >= kicks+2 })
	if hc.parkedNow.Load() {
		t.Fatal("parked with part of a record read")
	}
	sc.release()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if p, ok := c.next().(*http2.PingFrame); !ok || !p.IsAck() || p.Data[0] != 7 {
		t.Fatalf("after the split record: %v, want the PING's ACK", p)
	}
}

// splitConn writes, once split(n) was called, the first n bytes of the next
// Write at once and the rest when released.
type splitConn struct {
	net.Conn
	mu   sync.Mutex
	n    int
	hold chan struct{}
}

func (s *splitConn) split(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n, s.hold = n, make(chan struct{})
}

func (s *splitConn) release() { close(s.hold) }

func (s *splitConn) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, hold := s.n, s.hold
	s.n = 0
	s.mu.Unlock()
	if n == 0 || n >= len(p) {
		return s.Conn.Write(p)
	}
	k, err := s.Conn.Write(p[:n])
	if err != nil {
		return k, err
	}
	<-hold
	m, err := s.Conn.Write(p[n:])
	return k + m, err
}

// BenchmarkH2SweepTick: one sweep tick over 10 000 connections none of
// which is to be kicked, the sweep's cost per ParkIdleAfter: all parked
// (skipped without their lock), or all with open streams and waiting for
// a frame (each one's lock taken).
func BenchmarkH2SweepTick(b *testing.B) {
	for _, bc := range []struct {
		name      string
		kick      int32
		idleSince int64
	}{{"parked", h2Busy, 1}, {"busy", h2Waiting, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			s := &h2Server{conns: make(map[*h2conn]struct{})}
			for range 10000 {
				c := &h2conn{srv: s, rec: &recordConn{}, idleSince: bc.idleSince}
				c.kick.Store(bc.kick)
				s.conns[c] = struct{}{}
			}
			b.ReportAllocs()
			for b.Loop() {
				s.kickIdle(5)
			}
			if n := s.kicks.Load(); n != 0 {
				b.Fatalf("%d kicks, want none", n)
			}
		})
	}
}
