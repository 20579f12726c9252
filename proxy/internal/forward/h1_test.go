package forward

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http/httpguts"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/sockio"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testPool(maxIdle, maxConns int, queue, idle time.Duration) config.Pool {
	return config.Pool{MaxIdleConnsPerHost: maxIdle, MaxConnsPerHost: maxConns,
		QueueTimeout: config.Duration(queue), IdleTimeout: config.Duration(idle)}
}

func upstreamFor(t *testing.T, addr string, pool config.Pool, rht time.Duration) (*Pools, *Upstream) {
	t.Helper()
	ps := NewPools(Options{})
	t.Cleanup(ps.Close)
	tm := config.Timeouts{Connect: config.Duration(2 * time.Second), ResponseHeader: config.Duration(rht)}
	return ps, ps.Get(netip.MustParseAddrPort(addr), pool, tm)
}

// dump is what a backend saw of one request, in a comparable form.
func dump(r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s host=%s cl=%d te=%v\n", r.Method, r.RequestURI, r.Host, r.ContentLength, r.TransferEncoding)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %q\n", k, r.Header[k])
	}
	body, err := io.ReadAll(r.Body)
	fmt.Fprintf(&b, "body=%q err=%v trailer=%v\n", body, err, r.Trailer)
	return b.String()
}

// diffCase is one request/response pair of the differential test.
type diffCase struct {
	method    string
	uri       string
	hval      string
	body      []byte
	chunked   bool // request body of unknown length
	status    int
	resChunk  bool // response without Content-Length (chunked)
	resTrail  bool
	resHeader string
}

// exchangeStd and exchangeFast send the same request through http.Transport
// and Upstream.Do; each returns what the backend saw and what the client got.
func runDiff(t *testing.T, c diffCase) (backendStd, backendFast, clientStd, clientFast string) {
	t.Helper()
	// Never block the backend's handler: a blocked handler makes
	// httptest.Server.Close wait forever, which stalls a fuzz worker.
	seen := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- dump(r):
		default:
			t.Errorf("backend saw more than the 2 requests of one case: %s %s", r.Method, r.RequestURI)
		}
		if c.resTrail {
			w.Header().Set("Trailer", "X-Sum")
		}
		w.Header().Set("X-Echo", c.resHeader)
		body := strings.Repeat("b", len(c.body)+3)
		if !c.resChunk {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		}
		w.WriteHeader(c.status)
		io.WriteString(w, body)
		if c.resTrail {
			w.Header().Set("X-Sum", "sum-"+c.resHeader)
		}
	}))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	// Bounded exchanges: a hang in either client fails the case instead of
	// stalling the fuzzer.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	var rb io.Reader
	if c.body != nil {
		rb = bytes.NewReader(c.body)
		if c.chunked {
			rb = io.MultiReader(rb) // hides the length: chunked
		}
	}
	req, err := http.NewRequestWithContext(ctx, c.method, "http://"+addr+c.uri, rb)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "demo.test"
	req.Header.Set("User-Agent", "diff")
	req.Header.Set("X-Value", c.hval)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("std: %v", err)
	}
	backendStd = recvSeen(t, ctx, seen)
	clientStd = clientDump(res.StatusCode, res.Header, res.Body, func() http.Header { return res.Trailer })

	_, up := upstreamFor(t, addr, testPool(2, 0, 0, time.Minute), 0)
	// The server forwards r.URL.RequestURI(), as ReverseProxy does.
	fr := &Request{Method: c.method, URI: req.URL.RequestURI(), Host: "demo.test",
		Header: http.Header{"User-Agent": {"diff"}, "X-Value": {c.hval}}}
	if c.body != nil {
		fr.Body, fr.BodyLength = bytes.NewReader(c.body), int64(len(c.body))
		if c.chunked {
			fr.Body, fr.BodyLength = io.MultiReader(bytes.NewReader(c.body)), -1
		}
	}
	h := make(http.Header)
	fres, err := up.Do(ctx, fr, h)
	if err != nil {
		t.Fatalf("fast: %v", err)
	}
	backendFast = recvSeen(t, ctx, seen)
	clientFast = clientDump(fres.Status, h, fres.Body, fres.Body.Trailer)
	return
}

func recvSeen(t *testing.T, ctx context.Context, seen <-chan string) string {
	t.Helper()
	select {
	case s := <-seen:
		return s
	case <-ctx.Done():
		t.Fatalf("backend never reported the request: %v", ctx.Err())
		return ""
	}
}

func clientDump(status int, h http.Header, body io.ReadCloser, trailer func() http.Header) string {
	b, err := io.ReadAll(body)
	body.Close()
	h = h.Clone()
	// Transport moves "Trailer" into Response.Trailer; Do keeps the
	// announcement in the header for the relay to pass on.
	for _, k := range []string{"Date", "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer"} {
		delete(h, k)
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var s strings.Builder
	fmt.Fprintf(&s, "%d\n", status)
	for _, k := range keys {
		fmt.Fprintf(&s, "%s: %q\n", k, h[k])
	}
	tr := trailer()
	if len(tr) == 0 {
		tr = nil
	}
	fmt.Fprintf(&s, "body=%q err=%v trailer=%v\n", b, err, tr)
	return s.String()
}

// FuzzDoMatchesTransport is the differential test of the fast client: the
// same request sent through http.Transport and through Upstream.Do must reach
// the backend identically and come back identically (status, end-to-end
// headers, body, trailers). The seeds run in every `go test`.
//
// Bodies are capped at maxFuzzBody bytes (and strings at 64-128): every execution starts a backend,
// so minimising a new input of tens of KiB took the fuzzer's whole default
// minimisation time (60 s per input) and showed as 0 execs/s. Large bodies
// (over the 32 KiB copy buffer) are covered by TestDoMatchesTransportLargeBodies.
func FuzzDoMatchesTransport(f *testing.F) {
	f.Add(uint8(0), "/", "v", []byte(nil), false, uint8(0), false, false, "e")
	f.Add(uint8(1), "/post?x=1&y=%20", "a b", []byte("hello"), false, uint8(1), true, true, "t")
	f.Add(uint8(1), "/chunk", "", []byte(strings.Repeat("z", maxFuzzBody)), true, uint8(2), false, false, "")
	f.Add(uint8(2), "/head", "h", []byte(nil), false, uint8(0), false, false, "x")
	f.Add(uint8(0), "/nc", "v", []byte(nil), false, uint8(3), false, false, "n")
	f.Add(uint8(3), "/put", "v", []byte("put-body"), true, uint8(4), true, true, "p")
	f.Fuzz(func(t *testing.T, m uint8, path, hval string, body []byte, chunked bool, st uint8, resChunk, resTrail bool, resHeader string) {
		methods := []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut}
		statuses := []int{200, 201, 204, 304, 503}
		c := diffCase{method: methods[int(m)%len(methods)], hval: hval, body: body, chunked: chunked,
			status: statuses[int(st)%len(statuses)], resChunk: resChunk, resTrail: resTrail, resHeader: resHeader}
		if _, err := url.ParseRequestURI(path); err != nil || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " #\x00\r\n\t") || !validValue(hval) || !validValue(resHeader) {
			return // not a request a front server would accept
		}
		if len(body) > maxFuzzBody || len(path) > 128 || len(hval) > 64 || len(resHeader) > 64 {
			return // large bodies: TestDoMatchesTransportLargeBodies
		}
		c.uri = path
		if c.method == http.MethodGet || c.method == http.MethodHead {
			c.body, c.chunked = nil, false
		}
		if len(c.body) == 0 {
			c.body, c.chunked = nil, false
		}
		bs, bf, cs, cf := runDiff(t, c)
		if bs != bf {
			t.Errorf("backend saw different requests:\nstd:\n%s\nfast:\n%s", bs, bf)
		}
		if cs != cf {
			t.Errorf("client got different responses:\nstd:\n%s\nfast:\n%s", cs, cf)
		}
	})
}

const maxFuzzBody = 256

// TestDoMatchesTransportLargeBodies is the differential test with bodies
// larger than the copy buffers, both ways, sized and chunked.
func TestDoMatchesTransportLargeBodies(t *testing.T) {
	for _, c := range []diffCase{
		{method: http.MethodPost, uri: "/big", hval: "v", body: []byte(strings.Repeat("z", 70000)), status: 200},
		{method: http.MethodPost, uri: "/chunk", body: []byte(strings.Repeat("y", 70000)), chunked: true, status: 201, resChunk: true},
		{method: http.MethodPut, uri: "/trail", body: []byte(strings.Repeat("x", 40000)), chunked: true, status: 200, resChunk: true, resTrail: true, resHeader: "t"},
	} {
		bs, bf, cs, cf := runDiff(t, c)
		if bs != bf {
			t.Errorf("%s: backend saw different requests:\nstd:\n%.400s\nfast:\n%.400s", c.uri, bs, bf)
		}
		if cs != cf {
			t.Errorf("%s: client got different responses:\nstd:\n%.400s\nfast:\n%.400s", c.uri, cs, cf)
		}
		if !strings.Contains(bs, strings.Repeat(string(c.body[0]), 100)) {
			t.Errorf("%s: backend dump lacks the body", c.uri)
		}
	}
}

func validValue(s string) bool {
	if s != strings.TrimSpace(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f || s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// rawBackend accepts connections and runs serve on each.
func rawBackend(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return l.Addr().String()
}

// readReq reads one request head (no body) from br.
func readReq(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		b.WriteString(line)
		if line == "\r\n" {
			return b.String(), nil
		}
	}
}

func get(up *Upstream, ctx context.Context) (int, string, error) {
	h := make(http.Header)
	res, err := up.Do(ctx, &Request{Method: "GET", URI: "/", Host: "b", Header: http.Header{}}, h)
	if err != nil {
		return 0, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res.Status, string(b), err
}

// A keep-alive connection the backend closed, half-closed or reset while it
// sat idle is never chosen: the request goes out on a new connection.
func TestClosedIdleConnectionNeverReused(t *testing.T) {
	for _, how := range []string{"close", "half-close", "reset"} {
		t.Run(how, func(t *testing.T) {
			var conns, reqs atomic.Int64
			addr := rawBackend(t, func(c net.Conn) {
				conns.Add(1)
				br := bufio.NewReader(c)
				if _, err := readReq(br); err != nil {
					return
				}
				reqs.Add(1)
				// Promises keep-alive, then goes away.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				switch how {
				case "half-close":
					c.(*net.TCPConn).CloseWrite()
					c.SetReadDeadline(time.Now().Add(5 * time.Second))
					readReq(br) // a request sent now would be read
				case "reset":
					c.(*net.TCPConn).SetLinger(0)
				}
			})
			_, up := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 0)
			if s, b, err := get(up, context.Background()); err != nil || s != 200 || b != "ok" {
				t.Fatalf("first: %d %q %v", s, b, err)
			}
			poll.EventuallyTrue(t, 20*time.Second, "pooled", func() bool { return up.IdleConns() == 1 })
			// The FIN/RST crosses loopback asynchronously: poll until the
			// idle connection's check sees it.
			poll.EventuallyTrue(t, 20*time.Second, "backend went away", func() bool {
				up.idleMu.Lock()
				defer up.idleMu.Unlock()
				return len(up.idle) == 1 && up.idle[0].nc.(*sockio.Conn).Idle() != nil
			})
			if s, b, err := get(up, context.Background()); err != nil || s != 200 || b != "ok" {
				t.Fatalf("second: %d %q %v, want 200 on a new connection", s, b, err)
			}
			if conns.Load() != 2 || reqs.Load() != 2 {
				t.Fatalf("%d connections, %d requests at the backend, want 2 and 2", conns.Load(), reqs.Load())
			}
		})
	}
}

// An exchange that fails on a reused connection before any answer byte is a
// *StaleConnError (Unsent false: the request left), and Do does not resend
// it: that is the caller's attempt to make.
func TestStaleReusedConnectionReported(t *testing.T) {
	var reqs atomic.Int64
	addr := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := readReq(br); err != nil {
			return
		}
		reqs.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		if _, err := readReq(br); err != nil { // read the next request, never answer it
			return
		}
		reqs.Add(1)
	})
	_, up := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 0)
	if s, b, err := get(up, context.Background()); err != nil || s != 200 || b != "ok" {
		t.Fatalf("first: %d %q %v", s, b, err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "pooled", func() bool { return up.IdleConns() == 1 })
	_, _, err := get(up, context.Background())
	var se *StaleConnError
	if !errors.As(err, &se) || se.Unsent {
		t.Fatalf("second: %v, want a *StaleConnError with Unsent false", err)
	}
	if reqs.Load() != 2 {
		t.Fatalf("backend read %d requests, want 2 (no resend)", reqs.Load())
	}
	if up.IdleConns() != 0 || up.InUse() != 0 {
		t.Fatalf("after the failure: %d idle, %d in use, want 0 and 0", up.IdleConns(), up.InUse())
	}
}

// The response-header timeout and the context deadline are net timeouts.
func TestResponseHeaderTimeoutAndDeadline(t *testing.T) {
	addr := rawBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) }) // never answers
	_, up := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 100*time.Millisecond)
	_, _, err := get(up, context.Background())
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("response-header timeout: %v, want a net timeout", err)
	}
	_, up2 := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := get(up2, ctx); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline: %v, want a net timeout", err)
	}
	// Cancelling (no deadline) interrupts the exchange too.
	ctx3, cancel3 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel3)
	if _, _, err := get(up2, ctx3); err == nil {
		t.Fatal("cancelled exchange succeeded")
	}
}

// With Expect: 100-continue a backend that answers at once never gets the
// body, and the client body is never read.
func TestExpectContinueFinalAnswerSkipsBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reject" {
			w.WriteHeader(http.StatusExpectationFailed)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	defer srv.Close()
	_, up := upstreamFor(t, srv.Listener.Addr().String(), testPool(4, 0, 0, time.Minute), 0)
	for _, tc := range []struct {
		path   string
		status int
		reads  bool
	}{{"/reject", 417, false}, {"/echo", 200, true}} {
		var read atomic.Bool
		body := readerFunc(func(p []byte) (int, error) {
			if read.Swap(true) {
				return 0, io.EOF
			}
			return copy(p, "payload"), nil
		})
		h := make(http.Header)
		res, err := up.Do(context.Background(), &Request{Method: "POST", URI: tc.path, Host: "b", Header: http.Header{},
			Body: body, BodyLength: 7, ExpectContinue: true}, h)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.Status != tc.status || read.Load() != tc.reads {
			t.Fatalf("%s: status %d body %q read=%v, want %d read=%v", tc.path, res.Status, b, read.Load(), tc.status, tc.reads)
		}
		if tc.reads && string(b) != "payload" {
			t.Fatalf("%s: echoed %q", tc.path, b)
		}
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// Hop-by-hop headers never cross the proxy, in either direction.
func TestHopByHopRemoved(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("Connection", "X-Secret")
		w.Header().Set("X-Secret", "s")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Kept", "k")
		io.WriteString(w, "x")
	}))
	defer srv.Close()
	_, up := upstreamFor(t, srv.Listener.Addr().String(), testPool(4, 0, 0, time.Minute), 0)
	h := make(http.Header)
	res, err := up.Do(context.Background(), &Request{Method: "GET", URI: "/", Host: "b", Header: http.Header{
		"Connection": {"X-Forwarded-For, X-Drop"}, "X-Drop": {"d"}, "Keep-Alive": {"1"}, "Te": {"trailers, gzip"},
		"Proxy-Authorization": {"p"}, "Upgrade": {"x"}, "X-Keep": {"k"}, "Forwarded": {"for=x"}},
		Skip: []string{"Forwarded"}, Extra: []HeaderField{{"X-Forwarded-For", "10.0.0.1"}}}, h)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	rh := <-got
	for _, k := range []string{"Connection", "X-Drop", "Keep-Alive", "Proxy-Authorization", "Upgrade", "Forwarded"} {
		if _, ok := rh[k]; ok {
			t.Errorf("backend got hop-by-hop/skipped %s: %q", k, rh[k])
		}
	}
	if rh.Get("X-Keep") != "k" || rh.Get("Te") != "trailers" || rh.Get("X-Forwarded-For") != "10.0.0.1" {
		t.Errorf("backend headers %v", rh)
	}
	for _, k := range []string{"Connection", "X-Secret", "Keep-Alive"} {
		if _, ok := h[k]; ok {
			t.Errorf("client got hop-by-hop %s", k)
		}
	}
	if h.Get("X-Kept") != "k" {
		t.Errorf("client headers %v", h)
	}
}

// A body cut short by the backend is an error, never a clean EOF.
func TestTruncatedBodyIsAnError(t *testing.T) {
	addr := rawBackend(t, func(c net.Conn) {
		readReq(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
	})
	_, up := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 0)
	if _, b, err := get(up, context.Background()); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("body %q err %v, want ErrUnexpectedEOF", b, err)
	}
	if up.IdleConns() != 0 {
		t.Fatal("a broken connection was pooled")
	}
}

// Body.Buffered: a part of the next chunk-size line is not a byte the next
// Read can return without waiting; a whole line is.
func TestBodyBufferedChunked(t *testing.T) {
	release := make(chan struct{})
	addr := rawBackend(t, func(c net.Conn) {
		if _, err := readReq(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n1")
		<-release
		io.WriteString(c, "\r\nX\r\n0\r\n\r\n")
	})
	_, up := upstreamFor(t, addr, testPool(4, 0, 0, time.Minute), 0)
	res, err := up.Do(context.Background(), &Request{Method: "GET", URI: "/", Host: "b", Header: http.Header{}}, make(http.Header))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, 64)
	n, err := res.Body.Read(buf)
	if err != nil || string(buf[:n]) != "first" {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	poll.EventuallyTrue(t, 20*time.Second, "the partial chunk line buffered", func() bool { return res.Body.c.br.Buffered() > 0 })
	if res.Body.Buffered() {
		t.Fatal("Buffered with only a part of the next chunk-size line")
	}
	close(release)
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != "X" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

// The request head is appended into the write buffer's free space, or into
// the connection's scratch when it is longer (writeHead). Heads around and
// over the 4 KiB buffer, then short ones, on one keep-alive connection,
// reach the backend as sent, each in its exact bytes.
func TestLongRequestHeadsExact(t *testing.T) {
	addr, heads := headRecorder(t, 16)
	_, up := upstreamFor(t, addr, testPool(1, 0, 0, time.Minute), 0)
	ctx := context.Background()
	for i, n := range []int{10, 4000, 4096, 6000, 20000, 10, 9000, 10} {
		v := strings.Repeat(string(rune('a'+i)), n)
		req := &Request{Method: "GET", URI: "/p?i=" + fmt.Sprint(i), Host: "b", Header: http.Header{"X-Long": {v}},
			Extra: []HeaderField{{Name: "X-Forwarded-For", Value: "192.0.2.1"}}}
		res, err := up.Do(ctx, req, make(http.Header))
		if err != nil {
			t.Fatalf("head %d (%d bytes): %v", i, n, err)
		}
		io.ReadAll(res.Body)
		res.Body.Close()
		want := "GET /p?i=" + fmt.Sprint(i) + " HTTP/1.1\r\nHost: b\r\nX-Long: " + v + "\r\nX-Forwarded-For: 192.0.2.1\r\n\r\n"
		if got := <-heads; got != want {
			t.Fatalf("head %d (%d bytes): backend read %d bytes %.80q..., want %d bytes %.80q...", i, n, len(got), got, len(want), want)
		}
	}
}

// finishHead looks up and removes only the names readFields saw, and
// AddTo adds a name to an empty map without a lookup when no earlier field
// had it. Hop-by-hop fields in any letter case, names a Connection field
// lists, repeated fields (their values in order, over and under the 16
// fields compared rather than looked up), repeated equal and conflicting
// Content-Length, and a map that held names before Do (they are the
// caller's: kept as they were, the backend's added). Response.Header holds
// the same fields in the backend's order.
func TestResponseHeaderFieldsExact(t *testing.T) {
	many := ""
	for i := 0; i < 20; i++ {
		many += fmt.Sprintf("X-F%d: %d\r\nx-rep: r%d\r\n", i%7, i, i)
	}
	cases := []struct {
		name, head string
		pre        http.Header // in the map before Do
		want       string      // the header after Do, sorted, and the body length
		order      string      // Response.Header in order, when given
		err        bool
	}{
		{name: "plain", head: "Content-Length: 2\r\nContent-Type: text/plain\r\nDate: d\r\n",
			want: `Content-Length=["2"] Content-Type=["text/plain"] Date=["d"] len=2`},
		{name: "hop-by-hop, any case", head: "connection: keep-alive\r\nKEEP-ALIVE: timeout=5\r\nproxy-connection: x\r\nUPGRADE: y\r\ntE: trailers\r\nContent-Length: 2\r\nX-A: a\r\n",
			want: `Content-Length=["2"] X-A=["a"] len=2`},
		{name: "one hop-by-hop name", head: "Upgrade: y\r\nContent-Length: 2\r\n", want: `Content-Length=["2"] len=2`},
		{name: "chunked, length dropped", head: "Transfer-Encoding: chunked\r\nContent-Length: 9\r\nX-A: a\r\n", want: `X-A=["a"] len=-1`},
		{name: "listed by Connection", head: "Connection: X-Secret, content-length\r\nX-Secret: s\r\nContent-Length: 2\r\nX-A: a\r\n",
			want: `X-A=["a"] len=-1`},
		{name: "repeated, in order", head: "X-A: 1\r\nX-B: 2\r\nx-a: 3\r\nX-A: 4\r\nContent-Length: 2\r\n",
			want:  `Content-Length=["2"] X-A=["1" "3" "4"] X-B=["2"] len=2`,
			order: "X-A: 1|X-B: 2|X-A: 3|X-A: 4|Content-Length: 2"},
		{name: "hop-by-hop between others", head: "X-A: 1\r\nConnection: keep-alive, X-B\r\nX-B: 2\r\nKeep-Alive: timeout=5\r\nX-C: 3\r\nContent-Length: 2\r\n",
			want: `Content-Length=["2"] X-A=["1"] X-C=["3"] len=2`, order: "X-A: 1|X-C: 3|Content-Length: 2"},
		{name: "equal lengths, the first kept", head: "Content-Length: 2\r\nX-A: 1\r\nContent-Length: 2\r\n",
			want: `Content-Length=["2"] X-A=["1"] len=2`, order: "Content-Length: 2|X-A: 1"},
		{name: "204 drops its length", head: "Content-Length: 0\r\nX-A: 1\r\n", want: `X-A=["1"] len=0`, order: "X-A: 1"},
		{name: "equal lengths", head: "Content-Length: 2\r\nContent-Length: 2\r\n", want: `Content-Length=["2"] len=2`},
		{name: "conflicting lengths", head: "Content-Length: 2\r\nContent-Length: 3\r\n", err: true},
		{name: "many fields", head: many + "Content-Length: 2\r\n",
			want: `Content-Length=["2"] X-F0=["0" "7" "14"] X-F1=["1" "8" "15"] X-F2=["2" "9" "16"] X-F3=["3" "10" "17"] X-F4=["4" "11" "18"] X-F5=["5" "12" "19"] X-F6=["6" "13"] X-Rep=["r0" "r1" "r2" "r3" "r4" "r5" "r6" "r7" "r8" "r9" "r10" "r11" "r12" "r13" "r14" "r15" "r16" "r17" "r18" "r19"] len=2`},
		{name: "names before Do", head: "Content-Length: 2\r\nX-A: a\r\n", pre: http.Header{"Connection": {"c"}, "Te": {"t"}, "X-A": {"0"}, "X-Pre": {"p"}},
			want: `Connection=["c"] Content-Length=["2"] Te=["t"] X-A=["0" "a"] X-Pre=["p"] len=2`, order: "Content-Length: 2|X-A: a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status := "200 OK"
			if strings.HasPrefix(c.name, "204") {
				status = "204 No Content"
			}
			addr := rawBackend(t, func(conn net.Conn) {
				if _, err := readReq(bufio.NewReader(conn)); err == nil {
					io.WriteString(conn, "HTTP/1.1 "+status+"\r\n"+c.head+"\r\nok")
				}
			})
			_, up := upstreamFor(t, addr, testPool(1, 0, 0, time.Minute), 0)
			h := c.pre
			if h == nil {
				h = make(http.Header)
			}
			res, err := up.Do(context.Background(), &Request{Method: "GET", URI: "/", Host: "b", Header: http.Header{}}, h)
			if c.err {
				if err == nil {
					res.Body.Close()
					t.Fatalf("Do answered %v, want an error", h)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for i := 0; i < res.Header.Len(); i++ {
				k, v := res.Header.Field(i)
				order = append(order, k+": "+string(v))
			}
			io.ReadAll(res.Body)
			res.Body.Close()
			if got := strings.Join(order, "|"); c.order != "" && got != c.order {
				t.Errorf("Response.Header: %s, want %s", got, c.order)
			}
			keys := make([]string, 0, len(h))
			for k := range h {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var b strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&b, "%s=%q ", k, h[k])
			}
			fmt.Fprintf(&b, "len=%d", res.ContentLength)
			if b.String() != c.want {
				t.Errorf("header after Do:\n%s\nwant\n%s", b.String(), c.want)
			}
		})
	}
}

// Every common response header name, as written and in lower case, sits in
// its own slot (nameSlot's constants are chosen so), and canonicalKey
// answers the map's answer for it, for other cases of it and for names
// that are not common.
func TestCommonNamesInTheirSlots(t *testing.T) {
	for name, n := range commonKeys {
		if s := commonSlots[nameSlot([]byte(name))]; s.name != name || s.n != n {
			t.Errorf("%q: slot %d holds %q, want it", name, nameSlot([]byte(name)), s.name)
		}
		for _, v := range []string{name, strings.ToUpper(name), strings.ToLower(name)} {
			k, bits := canonicalKey([]byte(v))
			if want := http.CanonicalHeaderKey(v); k != want || bits != bitsOf(want) {
				t.Errorf("canonicalKey(%q) = %q %b, want %q %b", v, k, bits, want, bitsOf(want))
			}
		}
	}
	for _, v := range []string{"X-Other", "x", "DATE-X", "content-lengtH", "Content-Lengtx"} {
		if k, _ := canonicalKey([]byte(v)); k != http.CanonicalHeaderKey(v) {
			t.Errorf("canonicalKey(%q) = %q, want %q", v, k, http.CanonicalHeaderKey(v))
		}
	}
}

// plainValue answers what the byte-by-byte check answers: every byte value
// at every place of values of 1 to 24 bytes (words, their seams and the
// tail), next to tabs and high bytes.
func TestPlainValueIsTheByteCheck(t *testing.T) {
	slow := func(v []byte) bool {
		for _, b := range v {
			if (b < ' ' && b != '\t') || b == 0x7f {
				return false
			}
		}
		return true
	}
	for _, fill := range []byte{'a', '\t', 0x80, 0xff, ' ', 0x7e} {
		for n := 1; n <= 24; n++ {
			for p := 0; p < n; p++ {
				for b := 0; b < 256; b++ {
					v := bytes.Repeat([]byte{fill}, n)
					v[p] = byte(b)
					if got, want := plainValue(v), slow(v); got != want {
						t.Fatalf("plainValue(%q) = %v, want %v", v, got, want)
					}
				}
			}
		}
	}
}

// tokenByte is httpguts.IsTokenRune, byte for byte.
func TestTokenByte(t *testing.T) {
	for c := 0; c < 256; c++ {
		if tokenByte[c] != httpguts.IsTokenRune(rune(c)) {
			t.Errorf("tokenByte[%#x] = %v", c, tokenByte[c])
		}
	}
}

// Request.Fields writes what Request.Header writes: the same lines, each
// name's values in the same order (only the order between names differs:
// the client's rather than the map's). Hop-by-hop names, names listed by
// Connection in one field or several, Te with and without trailers in one
// field or several, Skip and Extra names, repeated names.
func TestFieldsWrittenAsHeader(t *testing.T) {
	addr, heads := headRecorder(t, 4)
	_, up := upstreamFor(t, addr, testPool(1, 0, 0, time.Minute), 0)
	// byName is a head's field lines grouped by name, in order within one.
	byName := func(head string) string {
		lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
		m := map[string][]string{}
		for _, l := range lines[1:] {
			k, v, _ := strings.Cut(l, ": ")
			m[k] = append(m[k], v)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		fmt.Fprintf(&b, "%s\n", lines[0])
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%q\n", k, m[k])
		}
		return b.String()
	}
	cases := [][]HeaderField{
		{{"User-Agent", "u"}, {"Accept", "*/*"}},
		{{"X-A", "1"}, {"X-B", "2"}, {"X-A", "3"}, {"Connection", "X-B, keep-alive"}, {"Keep-Alive", "k"}, {"X-C", "c"}},
		{{"Connection", "X-A"}, {"X-A", "1"}, {"Connection", "x-c"}, {"X-C", "c"}, {"X-D", "d"}},
		{{"Te", "gzip"}, {"X-A", "1"}, {"Te", "trailers"}},
		{{"Te", "gzip, trailers"}},
		{{"Te", "gzip"}},
		{{"Connection", "te"}, {"Te", "trailers"}},
		{{"Upgrade", "x"}, {"Proxy-Connection", "p"}, {"Proxy-Authorization", "a"}, {"Trailer", "t"}, {"Transfer-Encoding", "chunked"},
			{"Content-Length", "9"}, {"Expect", "100-continue"}, {"Host", "h"}, {"Forwarded", "for=x"}, {"X-Forwarded-For", "1.2.3.4"}, {"X-Ok", "ok"}},
	}
	for i, fields := range cases {
		h := http.Header{}
		for _, f := range fields {
			h[f.Name] = append(h[f.Name], f.Value)
		}
		var got [2]string
		for j, fs := range [][]HeaderField{nil, fields} {
			req := &Request{Method: "GET", URI: "/", Host: "b", Header: h, Fields: fs, Skip: []string{"Forwarded"},
				Extra: []HeaderField{{"X-Forwarded-For", "192.0.2.1"}}}
			res, err := up.Do(context.Background(), req, make(http.Header))
			if err != nil {
				t.Fatalf("case %d: %v", i, err)
			}
			io.ReadAll(res.Body)
			res.Body.Close()
			got[j] = byName(<-heads)
		}
		if got[0] != got[1] {
			t.Errorf("case %d: from Header:\n%s\nfrom Fields:\n%s", i, got[0], got[1])
		}
	}
}

// headRecorder is a backend that sends every request head it reads to
// heads (buffered n) and answers each with a 2-byte 200.
func headRecorder(t *testing.T, n int) (string, <-chan string) {
	heads := make(chan string, n)
	addr := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			head, err := readReq(br)
			if err != nil {
				return
			}
			heads <- head
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})
	return addr, heads
}

// chunkReader gives its bytes n at a time, as a backend's segments arrive.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := min(r.n, len(p), len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}

// readHeadIn is what readHead makes of head arriving n bytes at a time
// (after the first byte was waited for, as exchange does): the status, the
// fields in order, the bytes left unread, or the error.
func readHeadIn(head string, n int) string {
	c := &conn{br: bufio.NewReaderSize(&chunkReader{b: []byte(head), n: n}, 4096), u: &Upstream{}}
	if _, err := c.br.Peek(1); err != nil {
		return "peek: " + err.Error()
	}
	status, err := c.readHead()
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d http10=%v", status, c.body.http10)
	for i := 0; i < c.header().Len(); i++ {
		k, v := c.header().Field(i)
		fmt.Fprintf(&b, "|%s=%q", k, v)
	}
	rest, _ := io.ReadAll(c.br)
	fmt.Fprintf(&b, " rest=%q", rest)
	return b.String()
}

// A head the reader holds whole is parsed from the buffer at once
// (readHeadBuffered); one arriving in pieces, line by line. Both read the
// same: every split of valid, odd and malformed heads gives what the whole
// head gives, and the whole head's reading is pinned.
func TestReadHeadWholeOrInPieces(t *testing.T) {
	cases := []struct{ head, want string }{
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\nDate: d\r\n\r\nok",
			`200 http10=false|Content-Length="2"|Content-Type="text/plain"|Date="d" rest="ok"`},
		{"HTTP/1.0 404 Not Found\nx-a:  1 \nX-Weird_Name!: v\n\nbody",
			`404 http10=true|X-A="1"|X-Weird_name!="v" rest="body"`},
		{"HTTP/1.1 204 No Content\r\n\r\n", `204 http10=false rest=""`},
		{"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", `error: forward: malformed backend response: header line "Bad Name: v"`},
		{"HTTP/1.1 200 OK\r\n: v\r\n\r\n", `error: forward: malformed backend response: header line ": v"`},
		{"HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n", `error: forward: malformed backend response: header X-A value has a control byte`},
		{"HTTP/1.1 2x0 OK\r\n\r\n", `error: forward: malformed backend response: status line "HTTP/1.1 2x0 OK"`},
		{"HTTP/1.1 200 OK\r\nX-A: a\r\n", `error: unexpected EOF`},
	}
	// An uncommon name in the slot of a common one is not taken for it.
	for i := 0; ; i++ {
		name := fmt.Sprintf("X-Slot-%d", i)
		if s := commonSlots[nameSlot([]byte(name))]; s.name != "" {
			cases = append(cases, struct{ head, want string }{"HTTP/1.1 200 OK\r\n" + name + ": v\r\n\r\n",
				fmt.Sprintf(`200 http10=false|%s="v" rest=""`, name)})
			break
		}
	}
	for _, c := range cases {
		if got := readHeadIn(c.head, len(c.head)); got != c.want {
			t.Errorf("%q whole:\n got %s\nwant %s", c.head, got, c.want)
		}
		for n := 1; n < len(c.head); n++ {
			if got := readHeadIn(c.head, n); got != c.want {
				t.Errorf("%q in pieces of %d:\n got %s\nwant %s", c.head, n, got, c.want)
			}
		}
	}
}

// Rest hands over a body that is all in memory and ends it; any other body
// is left as it was, to be read.
func TestBodyRest(t *testing.T) {
	body := func(mode bodyMode, remaining int64, data string, chunk int) *Body {
		c := &conn{br: bufio.NewReaderSize(&chunkReader{b: []byte(data), n: chunk}, 4096)}
		c.br.Peek(1) // what arrived with the header
		return &Body{c: c, mode: mode, remaining: remaining}
	}
	for _, tc := range []struct {
		name string
		b    *Body
		want string // Rest's answer, then what Read gives after it
	}{
		{"sized, all buffered", body(modeLength, 5, "hello next", 64), `"hello" true | "" EOF`},
		{"sized, part buffered", body(modeLength, 5, "hello", 3), `"" false | "hel" <nil>`},
		{"empty", body(modeNone, 0, "x", 64), `"" true | "" EOF`},
		{"chunked", body(modeChunked, 0, "5\r\nhello\r\n0\r\n\r\n", 64), `"" false | "" <nil>`},
		{"to the close", body(modeEOF, 0, "abc", 64), `"" false | "abc" <nil>`},
	} {
		if tc.b.mode == modeChunked {
			tc.b.cr = httputil.NewChunkedReader(tc.b.c.br)
		}
		p, ok := tc.b.Rest()
		buf := make([]byte, 16)
		n, err := tc.b.Read(buf)
		if tc.b.mode == modeChunked {
			n, err = 0, nil // the chunk reader reads ahead: only Rest's answer is pinned
		}
		errs := fmt.Sprint(err)
		if err == io.EOF {
			errs = "EOF"
		}
		if got := fmt.Sprintf("%q %v | %q %s", p, ok, buf[:n], errs); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
