package connlimit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/proxy/internal/sockio"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer serves a Limiter's listener on loopback: every admitted
// connection echoes what it reads and closes at EOF. conns receives them
// in accept order.
type echoServer struct {
	lim   *Limiter
	addr  string
	conns chan net.Conn
}

func newEchoServer(t *testing.T, o Options) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{lim: New(o), addr: ln.Addr().String(), conns: make(chan net.Conn, 16)}
	l := s.lim.Listener(sockio.Listener{Listener: ln})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.conns <- c
			wg.Add(1)
			go func() { defer wg.Done(); io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for {
			select {
			case c := <-s.conns:
				c.Close()
				continue
			default:
			}
			break
		}
		wg.Wait()
	})
	return s
}

// dial connects from the local IP from ("" for any), closed at cleanup.
func (s *echoServer) dial(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// admitted waits for the server side of the next admitted connection.
func (s *echoServer) admitted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.conns:
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no connection admitted")
		return nil
	}
}

// alive checks that c is open: it echoes a byte.
func alive(t *testing.T, c net.Conn, name string) {
	t.Helper()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatalf("%s: write: %v", name, err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'x' {
		t.Fatalf("%s: echo %q, %v: want it open", name, b[:], err)
	}
}

// closedByServer checks that the server closed c: the client reads EOF.
func closedByServer(t *testing.T, c net.Conn, name string) {
	t.Helper()
	var b [1]byte
	n, err := c.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %d bytes, %v: want EOF (closed by the server)", name, n, err)
	}
}

func counts(t *testing.T, l *Limiter, open int, rejMax, rejIP, evicted uint64) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, "limiter counts", func() error {
		if o, m, i, e := l.Open(), l.Rejected(ReasonMax), l.Rejected(ReasonPerIP), l.Evicted(); o != open || m != rejMax || i != rejIP || e != evicted {
			return fmt.Errorf("open %d, rejected max %d, per_ip %d, evicted %d; want %d, %d, %d, %d", o, m, i, e, open, rejMax, rejIP, evicted)
		}
		return nil
	})
}

// TestEvictsTheOldestIdle: at the limit a new connection is admitted after
// the connection idle the longest is closed — that one exactly; a busy one
// is never chosen, however old.
func TestEvictsTheOldestIdle(t *testing.T) {
	s := newEchoServer(t, Options{Max: 3})
	a := s.dial(t, "")
	sa := s.admitted(t)
	b := s.dial(t, "")
	sb := s.admitted(t)
	c := s.dial(t, "")
	s.admitted(t)
	Of(sa).Busy() // the oldest, serving a request
	counts(t, s.lim, 3, 0, 0, 0)

	d := s.dial(t, "") // b is the oldest idle
	s.admitted(t)
	closedByServer(t, b, "b (oldest idle)")
	counts(t, s.lim, 3, 0, 0, 1)
	alive(t, a, "a (busy)")
	alive(t, c, "c")
	alive(t, d, "d (new)")

	Of(sb).Idle() // evicted already: stays uncounted
	Of(sa).Idle() // a is now the newest idle: c goes next
	e := s.dial(t, "")
	s.admitted(t)
	closedByServer(t, c, "c (oldest idle)")
	counts(t, s.lim, 3, 0, 0, 2)
	alive(t, a, "a")
	alive(t, d, "d")
	alive(t, e, "e (new)")
}

// TestRefusesWhenNoneIdle: at the limit with every connection busy, the new
// one is closed right after its accept and counted; the busy ones go on.
func TestRefusesWhenNoneIdle(t *testing.T) {
	s := newEchoServer(t, Options{Max: 2})
	a := s.dial(t, "")
	Of(s.admitted(t)).Busy()
	b := s.dial(t, "")
	sb := s.admitted(t)
	Of(sb).Busy()
	c := s.dial(t, "")
	closedByServer(t, c, "c (refused)")
	counts(t, s.lim, 2, 1, 0, 0)
	alive(t, a, "a")
	alive(t, b, "b")

	b.Close() // the server closes its side at EOF: a slot is free
	counts(t, s.lim, 1, 1, 0, 0)
	d := s.dial(t, "")
	s.admitted(t)
	alive(t, d, "d")
	counts(t, s.lim, 2, 1, 0, 0)
}

// TestPerIPLimit: over the per-IP limit a new connection of that IP is
// refused (none of its idle ones evicted); other IPs are not affected; a
// closed connection frees its IP's slot.
func TestPerIPLimit(t *testing.T) {
	s := newEchoServer(t, Options{PerIP: 2})
	a1 := s.dial(t, "127.0.0.2")
	s.admitted(t)
	a2 := s.dial(t, "127.0.0.2")
	s.admitted(t)
	a3 := s.dial(t, "127.0.0.2")
	closedByServer(t, a3, "127.0.0.2's third")
	counts(t, s.lim, 2, 0, 1, 0)
	b1 := s.dial(t, "127.0.0.3")
	s.admitted(t)
	alive(t, a1, "127.0.0.2's first")
	alive(t, a2, "127.0.0.2's second")
	alive(t, b1, "127.0.0.3's first")
	counts(t, s.lim, 3, 0, 1, 0)

	a1.Close()
	counts(t, s.lim, 2, 0, 1, 0)
	a4 := s.dial(t, "127.0.0.2")
	s.admitted(t)
	alive(t, a4, "127.0.0.2's fourth")
	counts(t, s.lim, 3, 0, 1, 0)
}

// TestWarnsOncePerWindow: a refusal is logged with the flag and the limit,
// identical lines once per window (what happens when the window ends is
// api/logrepeat's, tested there in a synctest bubble).
func TestWarnsOncePerWindow(t *testing.T) {
	var buf syncbuf.Buffer
	s := newEchoServer(t, Options{Max: 1, Logger: slog.New(slog.NewJSONHandler(&buf, nil)), LogWindow: time.Hour})
	a := s.dial(t, "")
	Of(s.admitted(t)).Busy()
	for i := 1; i <= 3; i++ {
		c := s.dial(t, "")
		closedByServer(t, c, "refused")
		counts(t, s.lim, 1, uint64(i), 0, 0)
	}
	got := lines(&buf)
	if len(got) != 1 || !strings.Contains(got[0], `"msg":"client connection refused: --max-client-conns reached and no connection is idle"`) ||
		!strings.Contains(got[0], `"flag":"--max-client-conns","limit":1`) {
		t.Fatalf("log after 3 refusals in one window:\n%s\nwant one line naming --max-client-conns and limit 1", strings.Join(got, "\n"))
	}
	alive(t, a, "a")
}

// lines is what buf holds, a line each.
func lines(buf *syncbuf.Buffer) []string {
	s := strings.TrimSpace(buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestDefaultMax(t *testing.T) {
	for _, c := range []struct {
		fds  uint64
		want int
	}{{20000, 9872}, {1024, 384}, {256, 96}, {4, 1}, {0, 1}, {1 << 40, 1 << 30}} {
		if got := DefaultMax(c.fds); got != c.want {
			t.Errorf("DefaultMax(%d) = %d, want %d", c.fds, got, c.want)
		}
	}
}

// TestOfUnwraps: Of finds the admitted connection under NetConn wrappers,
// and nil for others; a nil Conn's Idle and Busy do nothing.
func TestOfUnwraps(t *testing.T) {
	c := &Conn{l: New(Options{Max: 1})}
	if Of(wrapped{c}) != c || Of(wrapped{wrapped{c}}) != c {
		t.Fatal("Of does not unwrap NetConn")
	}
	var other net.Conn = wrapped{nil}
	if Of(other) != nil || Of(nil) != nil {
		t.Fatal("Of of a connection not admitted: want nil")
	}
	Of(other).Idle()
	Of(other).Busy()
}

type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// BenchmarkAcceptClose is one loopback connect, accept and close, through a
// Limiter (total and per-IP limits) or not.
func BenchmarkAcceptClose(b *testing.B) {
	for _, limited := range []bool{false, true} {
		name := "plain"
		if limited {
			name = "limited"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var l net.Listener = sockio.Listener{Listener: ln}
			if limited {
				l = New(Options{Max: 1 << 20, PerIP: 1 << 20}).Listener(l)
			}
			defer l.Close()
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				sc, err := l.Accept()
				if err != nil {
					b.Fatal(err)
				}
				sc.Close()
				c.Close()
			}
		})
	}
}
