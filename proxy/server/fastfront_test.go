package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/proxy/internal/balance"
)

// frontBackend serves the cases of TestFrontsAnswerAlike.
func frontBackend(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/big": // over handoffMax, sized: streamed with its length
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", "200000")
		w.Write(bytes.Repeat([]byte("0123456789"), 20000))
	case "/small":
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "small body\n")
	case "/chunked": // unsized: streamed chunked, flushed as it comes
		fl := w.(http.Flusher)
		for i := 0; i < 5; i++ {
			fmt.Fprintf(w, "event %d\n", i)
			fl.Flush()
		}
	case "/trailer": // chunked with a trailer announced and sent
		w.Header().Set("Trailer", "X-Sum")
		// A Content-Type: with none, the std front's net/http sniffs one
		// from the first bytes and the fasthttp front adds none.
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part 1\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part 2\n")
		w.Header().Set("X-Sum", "sum-42")
	case "/echo": // the request body back, with its digest
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Digest", fmt.Sprintf("%x", sha256.Sum256(b)))
		w.Header().Set("X-Request-Length", fmt.Sprint(r.ContentLength))
		w.Write(b)
	case "/nocontent":
		w.WriteHeader(http.StatusNoContent)
	case "/headers":
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "xff=%s xfp=%s xfh=%s conn=%q secret=%q ua=%s cookie=%q\n",
			r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("Connection"), r.Header.Get("X-Secret"), r.UserAgent(), r.Header.Get("Cookie"))
	default:
		http.NotFound(w, r)
	}
}

// demoExchange sends one request for host demo.test (size: its body's
// length, -1 unknown) and returns the answer and its whole body.
func demoExchange(t *testing.T, c *http.Client, method, url string, body io.Reader, size int64, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "demo.test"
	if size >= 0 && body != nil {
		req.ContentLength = size
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: body: %v", method, url, err)
	}
	return res, b
}

// exchangeDump is what a client saw of one answer, comparable across fronts.
func exchangeDump(t *testing.T, c *http.Client, method, url string, body io.Reader, size int64, hdr map[string]string) string {
	t.Helper()
	res, b := demoExchange(t, c, method, url, body, size, hdr)
	digest := fmt.Sprintf("%x", sha256.Sum256(b))
	if len(b) <= 200 {
		digest = fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("trailer=%v %d len=%d te=%v ct=%q backend=%q digest-hdr=%q reqlen=%q cookies=%q cc=%q reason=%q body=%s",
		res.Trailer, res.StatusCode, res.ContentLength, res.TransferEncoding, res.Header.Get("Content-Type"), res.Header.Get("X-Backend"),
		res.Header.Get("X-Digest"), res.Header.Get("X-Request-Length"), res.Header["Set-Cookie"], res.Header.Get("Cache-Control"),
		res.Header.Get(ReasonHeader), digest)
}

// TestFrontsAnswerAlike sends the same requests through both fronts and
// compares what the client gets: sized and unsized bodies over the buffered
// limit, HEAD, 204, streamed and chunked request bodies, multi-valued and
// hop-by-hop headers.
func TestFrontsAnswerAlike(t *testing.T) {
	b := newBackend(t, "b1", frontBackend)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	o := Options{MaxBodyBytes: 1 << 20, UpstreamClient: UpstreamFast} // fronts compared, not upstream clients
	std := newProxy(t, snap, proxyOpts{frontKind: FrontStd, opts: o})
	fast := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, opts: o})
	big := bytes.Repeat([]byte("abcdefgh"), 40000) // 320 KB
	cases := []struct {
		name, method, path string
		body               func() io.Reader
		size               int64
		hdr                map[string]string
	}{
		{"small", "GET", "/small", nil, -1, nil},
		{"big sized", "GET", "/big", nil, -1, nil},
		{"chunked answer", "GET", "/chunked", nil, -1, nil},
		{"trailer", "GET", "/trailer", nil, -1, nil},
		{"head", "HEAD", "/big", nil, -1, nil},
		{"no content", "GET", "/nocontent", nil, -1, nil},
		{"sized upload", "POST", "/echo", func() io.Reader { return bytes.NewReader(big) }, int64(len(big)), nil},
		{"chunked upload", "PUT", "/echo", func() io.Reader { return io.MultiReader(bytes.NewReader(big[:70000])) }, -1, nil},
		{"small upload", "POST", "/echo", func() io.Reader { return strings.NewReader("hello") }, 5, nil},
		{"headers", "GET", "/headers", nil, -1, map[string]string{"Connection": "X-Secret", "X-Secret": "s",
			"X-Forwarded-For": "6.6.6.6", "User-Agent": "ua-1", "Cookie": "c1=1; c2=2"}},
		{"not found", "GET", "/missing", nil, -1, nil},
	}
	cs, cf := client(t), client(t)
	for _, c := range cases {
		var bs, bf io.Reader
		if c.body != nil {
			bs, bf = c.body(), c.body()
		}
		ds := exchangeDump(t, cs, c.method, std.url+c.path, bs, c.size, c.hdr)
		df := exchangeDump(t, cf, c.method, fast.url+c.path, bf, c.size, c.hdr)
		if ds != df {
			t.Errorf("%s: fronts differ:\nstd:      %s\nfasthttp: %s", c.name, ds, df)
		}
	}
}

func TestFastFrontNeedsTheFastUpstreamClient(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")}),
		UpstreamClient: UpstreamStd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewFront(FrontFastHTTP, FrontOptions{}); err == nil || !strings.Contains(err.Error(), "upstream client") {
		t.Fatalf("fasthttp front with the std upstream client: %v, want an error", err)
	}
	if _, err := s.NewFront("h2o", FrontOptions{}); err == nil || !strings.Contains(err.Error(), `front "h2o"`) {
		t.Fatalf("unknown front: %v, want an error naming it", err)
	}
}

// TestFastFrontPipelinedAnswersInOrder sends three requests in one write;
// the answers (one streamed after the handler) come back in order.
func TestFastFrontPipelinedAnswersInOrder(t *testing.T) {
	b := newBackend(t, "b1", frontBackend)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil))
	p := newProxy(t, snap, proxyOpts{frontKind: FrontFastHTTP, opts: Options{UpstreamClient: UpstreamFast}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET /small HTTP/1.1\r\nHost: demo.test\r\n\r\nGET /big HTTP/1.1\r\nHost: demo.test\r\n\r\nGET /chunked HTTP/1.1\r\nHost: demo.test\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for _, want := range []int{len("small body\n"), 200000, len("event 0\n") * 5} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || int(n) != want {
			t.Fatalf("answer: %d, %d bytes (%v), want 200 and %d bytes", res.StatusCode, n, err, want)
		}
	}
}

// BenchmarkFront is one keep-alive GET through each front to 4 loopback
// backends (100-byte bodies), client, proxy and backends in this process;
// cpu-ns/op is the process's CPU time per GET. fasthttp-full is lbproxy's
// full configuration on the fasthttp front: the JSON access line (to
// io.Discard) and 1 % parent-based trace sampling (spans to a no-op
// exporter), as bench/run.sh's lbproxy-full row.
func BenchmarkFront(b *testing.B) {
	for _, v := range []struct {
		name, kind string
		full       bool
	}{{FrontStd, FrontStd, false}, {FrontFastHTTP, FrontFastHTTP, false}, {"fasthttp-full", FrontFastHTTP, true}} {
		kind := v.kind
		b.Run(v.name, func(b *testing.B) {
			snap := benchSnapshot(b)
			o := Options{UpstreamClient: UpstreamFast}
			if v.full {
				fullOptions(b, &o, 0.01)
			}
			p := newProxy(b, snap, proxyOpts{frontKind: kind, opts: o})
			conn, err := net.Dial("tcp", p.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			benchGETs(b, conn)
		})
	}
}

// benchGETs sends b.N keep-alive GETs on conn, each answered 200 with 100 bytes.
func benchGETs(b *testing.B, conn net.Conn) {
	br := bufio.NewReader(conn)
	req := []byte("GET /index.html?q=1 HTTP/1.1\r\nHost: demo.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	defer func() { b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op") }()
	for i := 0; i < b.N; i++ {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || n != 100 {
			b.Fatalf("status %d, %d bytes", res.StatusCode, n)
		}
	}
}

// plainTarget agrees with url.ParseRequestURI wherever it answers.
func TestPlainTargetMatchesParseRequestURI(t *testing.T) {
	targets := []string{"/", "/a/b", "/index.html?q=1", "/a?b?c", "/a?", "/x;y=1/z@h:8,$&+=", "/-._~",
		"/a%20b", "/a(b)", "/a!b", "/a*b", "/a'b", "/a b", "*", "http://h/p", "", "/é", "/a#f", "/a?x=%zz", "//x/y"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := "/?%#:@!$&'()*+,;=-._~aZ09 \"<>[]\\^`{|}é"
	for range 5000 {
		b := []byte{'/'}
		for range r.IntN(12) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		targets = append(targets, string(b))
	}
	for _, target := range targets {
		path, query, ok := plainTarget(target)
		if !ok {
			continue
		}
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("%q: plainTarget accepted what ParseRequestURI rejects: %v", target, err)
		}
		if want := (url.URL{Path: path, RawQuery: query}); *u != want {
			t.Fatalf("%q: plainTarget gives %#v, ParseRequestURI %#v", target, want, *u)
		}
	}
}

// TestShutdownBeforeServe: lbproxy starts each front's Serve in a goroutine,
// and a proxy stopped at once may shut a front down before that goroutine
// runs. Serve must then answer http.ErrServerClosed at once for every front
// (fasthttp's own Serve would serve on and Run would never return).
func TestShutdownBeforeServe(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")}),
		UpstreamClient: UpstreamFast})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := testCertificate(t)
	fronts := map[string]func() (Front, error){
		FrontStd:      func() (Front, error) { return s.NewFront(FrontStd, FrontOptions{}) },
		FrontFastHTTP: func() (Front, error) { return s.NewFront(FrontFastHTTP, FrontOptions{}) },
		"tls+" + FrontStd: func() (Front, error) {
			return s.TLSFront(FrontStd, FrontOptions{Certificates: []tls.Certificate{cert}})
		},
		"tls+" + FrontFastHTTP: func() (Front, error) {
			return s.TLSFront(FrontFastHTTP, FrontOptions{Certificates: []tls.Certificate{cert}})
		},
	}
	for name, mk := range fronts {
		for _, stop := range []string{"Shutdown", "Close"} {
			f, err := mk()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if stop == "Shutdown" {
				err = f.Shutdown(context.Background())
			} else {
				err = f.Close()
			}
			if err != nil {
				t.Fatalf("%s: %s before Serve: %v", name, stop, err)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- f.Serve(l) }()
			select {
			case err := <-served:
				if !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("%s: Serve after %s: %v, want http.ErrServerClosed", name, stop, err)
				}
			case <-time.After(10 * time.Second):
				l.Close() // ends the Serve that did not return
				t.Fatalf("%s: Serve after %s did not return", name, stop)
			}
			l.Close()
		}
	}
}

// TestServeThenShutdownReturnsServerClosed: the fasthttp front's Serve
// answers http.ErrServerClosed after a Shutdown, as net/http's does.
func TestServeThenShutdownReturnsServerClosed(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")}),
		UpstreamClient: UpstreamFast})
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.NewFront(FrontFastHTTP, FrontOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan error, 1)
	go func() { served <- f.Serve(l) }()
	c, err := net.Dial("tcp", l.Addr().String()) // an answer: Serve is serving
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: demo.test\r\nConnection: close\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatalf("answer: %v", err)
	}
	c.Close()
	if err := f.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("Serve: %v, want http.ErrServerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Shutdown")
	}
}

// remoteAddrConn is a net.Conn with a given remote address.
type remoteAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteAddrConn) RemoteAddr() net.Addr { return c.addr }

// ServeHTTP takes the fasthttp front's peer address from its connection,
// parsed once (addrConn.peer), and parses RemoteAddr otherwise: either way
// it sees what netip.ParseAddrPort(r.RemoteAddr) answers, for IPv4, IPv6,
// IPv4-mapped and zoned peers and an address that does not parse, and
// parses again when the request's RemoteAddr is not the connection's.
func TestRemoteAddrPortIsParse(t *testing.T) {
	addrs := []net.Addr{
		&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 54321},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.8").To16(), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 8080, Zone: "eth0"},
		&net.UnixAddr{Name: "/tmp/sock", Net: "unix"},
	}
	for _, addr := range addrs {
		c := &addrConn{Conn: remoteAddrConn{addr: addr}}
		a := &fastAdapter{conn: c}
		a.req.RemoteAddr = c.remoteAddr()
		for _, remote := range []string{a.req.RemoteAddr, "198.51.100.1:80"} {
			a.req.RemoteAddr = remote
			want, err := netip.ParseAddrPort(remote)
			got, ok := remoteAddrPort(a, &a.req)
			if got != want || ok != (err == nil) {
				t.Errorf("remoteAddrPort for %s (connection %s) = %v %v, want %v %v", remote, addr, got, ok, want, err == nil)
			}
		}
		r := &http.Request{RemoteAddr: "203.0.113.9:9"} // not the adapter's request
		if got, ok := remoteAddrPort(a, r); !ok || got != netip.MustParseAddrPort(r.RemoteAddr) {
			t.Errorf("remoteAddrPort of another request = %v %v, want %s", got, ok, r.RemoteAddr)
		}
	}
}

// Every common request header name sits in its own slot (requestKeySlot's
// constants are chosen so), and internKey answers the canonical name for
// it, for other cases of it and for names that are not common.
func TestRequestKeysInTheirSlots(t *testing.T) {
	for k := range commonRequestKeys {
		if s := requestKeySlots[requestKeySlot([]byte(k))]; s != k {
			t.Errorf("%q: slot %d holds %q, want it", k, requestKeySlot([]byte(k)), s)
		}
		for _, v := range []string{k, strings.ToUpper(k), strings.ToLower(k)} {
			if got := internKey([]byte(v)); got != http.CanonicalHeaderKey(v) {
				t.Errorf("internKey(%q) = %q, want %q", v, got, http.CanonicalHeaderKey(v))
			}
		}
	}
	for _, v := range []string{"X-Other", "x", "Host-X", "User-Agenx"} {
		if got := internKey([]byte(v)); got != http.CanonicalHeaderKey(v) {
			t.Errorf("internKey(%q) = %q, want %q", v, got, http.CanonicalHeaderKey(v))
		}
	}
}

// reset's field list (forward writes from it) holds what the header map
// holds, name by name in order: repeated names, the Connection: close an
// HTTP/1.0 request or a close in a request implies, the over-limit marks
// left out.
func TestAdapterFieldsAreTheHeader(t *testing.T) {
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nX-B: 2\r\nx-a: 3\r\nUser-Agent: u\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: h\r\nClose: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\nX-A: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: X-A, close\r\nX-A: 1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\n" + overLimitMark + ": 7\r\nCookie: a=1; b=2\r\nContent-Length: 0\r\n\r\n",
	} {
		var ctx fasthttp.RequestCtx
		if err := ctx.Request.Header.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		a := adapters.Get().(*fastAdapter)
		if err := a.reset(&ctx); err != nil {
			t.Fatalf("%q: reset: %v", raw, err)
		}
		fromFields := http.Header{}
		for _, f := range a.hf {
			fromFields[f.Name] = append(fromFields[f.Name], f.Value)
		}
		if !reflect.DeepEqual(fromFields, a.req.Header) {
			t.Errorf("%q: fields %v, header %v", raw, fromFields, a.req.Header)
		}
		a.release()
	}
}

// WriteHeader gives fasthttp a Content-Type with SetContentType and no
// Date at all (unless a trailer announcement went before): what Add did
// with them in fasthttp, which keeps Date to itself. Pinned here, for the
// day fasthttp changes: Add's Date is dropped, Add's and SetContentType's
// Content-Type are the same; and through the front, the backend's type is
// relayed and its Date is not.
func TestFastFrontDateAndContentType(t *testing.T) {
	const old = "Mon, 01 Jan 2001 00:00:00 GMT"
	var added, set fasthttp.ResponseHeader
	added.Add("Date", old)
	added.Add("Content-Type", "text/x-a")
	set.SetContentType("text/x-a")
	if a, s := added.String(), set.String(); strings.Contains(a, "2001") || a != s {
		t.Errorf("fasthttp: Add gives\n%q\nSetContentType gives\n%q", a, s)
	}
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", old)
		w.Header().Set("Content-Type", "text/x-sluice")
		io.WriteString(w, "ok")
	})
	snap := oneBackendSnapshot(b)
	p := newProxy(t, snap, proxyOpts{opts: Options{UpstreamClient: UpstreamFast}, frontKind: FrontFastHTTP})
	res, body := get(t, client(t), p.url+"/", nil)
	if res.StatusCode != 200 || body != "ok" || res.Header.Get("Content-Type") != "text/x-sluice" ||
		res.Header.Get("Date") == "" || res.Header.Get("Date") == old || len(res.Header["Date"]) != 1 {
		t.Errorf("answer %d %q, Content-Type %q, Date %q: want 200 ok, text/x-sluice and the front's own Date",
			res.StatusCode, body, res.Header.Get("Content-Type"), res.Header["Date"])
	}
}
