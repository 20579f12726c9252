package forward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
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

// A reused connection the check found gone (countConn.refuse, as the peek
// leaves it once the backend closed the connection, before http.Transport's
// own read saw the close) is passed over inside one RoundTrip, as Do's
// getConn passes over an idle connection that is not usable: the request
// goes out once, on a new connection, its body given again by GetBody.
// Without a body to give again (no GetBody, or GetBody failing) it fails
// as before, an Unsent StaleConnError, and the backend saw nothing. The
// refuse is set by hand: with a real close the Transport's read usually
// drops the connection first, and the test would not see the pass-over.
func TestRoundTripPassesOverAConnectionFoundGone(t *testing.T) {
	errTaken := errors.New("body taken")
	for _, tc := range []struct {
		name    string
		method  string
		body    string
		getBody func(body string) func() (io.ReadCloser, error)
		sent    bool // the second request reaches the backend
	}{
		{"GET", http.MethodGet, "", nil, true},
		{"POST, GetBody", http.MethodPost, "payload", func(b string) func() (io.ReadCloser, error) {
			return func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(b)), nil }
		}, true},
		{"POST, no GetBody", http.MethodPost, "payload", nil, false},
		{"POST, GetBody fails", http.MethodPost, "payload", func(string) func() (io.ReadCloser, error) {
			return func() (io.ReadCloser, error) { return nil, errTaken }
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			var mu sync.Mutex
			var seen []string // method and body of each request the backend read
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				seen = append(seen, r.Method+" "+string(b))
				mu.Unlock()
				io.WriteString(w, "ok")
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			t.Cleanup(srv.Close)
			_, up := upstreamFor(t, srv.Listener.Addr().String(), testPool(4, 0, 0, time.Minute), 0)

			var taken []httptrace.GotConnInfo
			send := func(method, body string, getBody func() (io.ReadCloser, error)) (*http.Response, error) {
				ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
					GotConn: func(info httptrace.GotConnInfo) { taken = append(taken, info) }})
				var rb io.Reader
				if body != "" {
					rb = strings.NewReader(body)
				}
				req, err := http.NewRequestWithContext(ctx, method, "http://"+up.HostPort()+"/", rb)
				if err != nil {
					t.Fatal(err)
				}
				req.GetBody = getBody
				return up.RoundTrip(req)
			}
			res, err := send(http.MethodGet, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			// Read to its end, the answer puts its connection back in the
			// Transport's idle pool before the read returns.
			if b, err := io.ReadAll(res.Body); err != nil || string(b) != "ok" {
				t.Fatalf("first answer %q, %v", b, err)
			}
			res.Body.Close()
			first := taken[0].Conn.(*countConn)
			first.refuse.Store(true) // the check found the backend gone
			taken = nil

			var getBody func() (io.ReadCloser, error)
			if tc.getBody != nil {
				getBody = tc.getBody(tc.body)
			}
			res, err = send(tc.method, tc.body, getBody)
			if len(taken) == 0 || taken[0].Conn != net.Conn(first) || !taken[0].Reused {
				t.Fatalf("the second request did not take the first connection first (%+v): the Transport dropped it", taken)
			}
			want := []string{"GET "}
			if tc.sent {
				if err != nil {
					t.Fatalf("second request: %v, want an answer over a new connection", err)
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != "ok" {
					t.Fatalf("second answer %q, %v", b, err)
				}
				if len(taken) != 2 || taken[1].Reused {
					t.Fatalf("connections taken: %+v, want the gone one, then a new one", taken)
				}
				want = append(want, tc.method+" "+tc.body)
			} else {
				var se *StaleConnError
				// Its error is the refused write's (ErrBackendGone) or the
				// Transport's read of the connection it then closed.
				if !errors.As(err, &se) || !se.Unsent {
					t.Fatalf("second request: %v, want an Unsent StaleConnError", err)
				}
				if len(taken) != 1 {
					t.Fatalf("connections taken: %+v, want only the gone one", taken)
				}
			}
			mu.Lock()
			got := fmt.Sprint(seen)
			mu.Unlock()
			if got != fmt.Sprint(want) || conns.Load() != int64(len(want)) {
				t.Fatalf("the backend read %s over %d connections, want %s over %d", got, conns.Load(), want, len(want))
			}
		})
	}
}
