package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// rawExchange sends raw bytes on a new connection and returns the status
// line of the answer ("" if the connection was closed without one).
func rawExchange(t *testing.T, addr, raw string) (status string, rest string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	s := string(b)
	line, rest, _ := strings.Cut(s, "\r\n")
	return line, rest
}

func hostileProxy(t *testing.T, b *backend, mutate func(*config.Policy), po proxyOpts) *proxy {
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, mutate))
	return newProxy(t, snap, po)
}

// Request smuggling: conflicting framings are rejected, and a CL+TE request
// is framed by Transfer-Encoding alone (net/http follows RFC 9112 §6.3: the
// Content-Length is removed; it does not answer 400). What matters is that
// the proxy and the backend agree on where each request ends: the proxy
// re-frames every request it forwards, so the backend sees exactly the
// requests the proxy parsed and never the attacker's Content-Length.
func TestHostileRequestSmuggling(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	p := hostileProxy(t, b, nil, proxyOpts{})
	rejected := map[string]string{
		"conflicting Content-Length": "POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd",
		"bad Content-Length":         "POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: +4\r\n\r\nabcd",
		"unsupported coding":         "POST / HTTP/1.1\r\nHost: demo.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	}
	for name, raw := range rejected {
		status, _ := rawExchange(t, p.addr, raw)
		if !strings.HasPrefix(status, "HTTP/1.1 400") && !strings.HasPrefix(status, "HTTP/1.1 501") {
			t.Errorf("%s: answered %q, want 400 (or 501 for an unsupported coding)", name, status)
		}
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("backend saw %d rejected requests, want 0", n)
	}
	// CL+TE: "0\r\n\r\n" ends the chunked body; what follows is a second
	// request on the client's connection, parsed as such by the proxy.
	raw := "POST /first HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET /second HTTP/1.1\r\nHost: demo.test\r\nConnection: close\r\n\r\n"
	// The net/http front answers both; the fasthttp front answers the first
	// and closes the connection (RFC 9112 §6.3: a server MUST close the
	// connection after a CL+TE request). Either way nothing is smuggled.
	status, rest := rawExchange(t, p.addr, raw)
	closedAfterFirst := strings.Count(rest, "HTTP/1.1 200") == 0 && strings.Contains(rest, "Connection: close\r\n")
	if !strings.HasPrefix(status, "HTTP/1.1 200") || (strings.Count(rest, "HTTP/1.1 200") != 1 && !closedAfterFirst) {
		t.Fatalf("CL+TE: %q + %q, want two 200 answers, or one that closes the connection", status, rest)
	}
	want := []string{"/first", "/second"}
	if closedAfterFirst {
		want = want[:1]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var got []string
	for _, r := range b.reqs {
		got = append(got, r.URL.Path)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("backend saw requests %q, want %q", got, want)
	}
	if cl := b.reqs[0].Header.Get("Content-Length"); cl != "" || b.reqs[0].ContentLength > 0 {
		t.Fatalf("backend saw the attacker's Content-Length %q (length %d)", cl, b.reqs[0].ContentLength)
	}
}

func TestHostileOversizedHeadersAndBody(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	p := hostileProxy(t, b, nil, proxyOpts{opts: Options{MaxBodyBytes: 1024}, front: FrontOptions{MaxHeaderBytes: 4096}})
	big := strings.Repeat("a", 16<<10)
	status, _ := rawExchange(t, p.addr, "GET / HTTP/1.1\r\nHost: demo.test\r\nX-Big: "+big+"\r\n\r\n")
	if !strings.HasPrefix(status, "HTTP/1.1 431") {
		t.Errorf("oversized headers: %q, want 431", status)
	}
	body := strings.Repeat("b", 2048)
	status, _ = rawExchange(t, p.addr, fmt.Sprintf("POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	if !strings.HasPrefix(status, "HTTP/1.1 413") {
		t.Errorf("declared oversized body: %q, want 413", status)
	}
	chunked := fmt.Sprintf("PUT / HTTP/1.1\r\nHost: demo.test\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	status, rest := rawExchange(t, p.addr, chunked)
	if !strings.HasPrefix(status, "HTTP/1.1 413") || !strings.Contains(rest, ReasonHeader+": "+CodeBodyTooLarge) {
		t.Errorf("chunked oversized body: %q, want 413 with %s", status, CodeBodyTooLarge)
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("backend saw %d oversized requests, want 0", n)
	}
}

func TestHostileSlowlorisClosedWithinHeaderTimeout(t *testing.T) {
	b := newBackend(t, "b1", nil)
	p := hostileProxy(t, b, nil, proxyOpts{front: FrontOptions{ReadHeaderTimeout: 300 * time.Millisecond}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: demo.test\r\nX-Slow: ")
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	// Keep trickling header bytes; the server must give up anyway.
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(conn)
		done <- err
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for closed := false; !closed; {
		select {
		case err := <-done:
			// EOF (nil here) or a reset (we kept writing after the close).
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("read: %v (want the server to close the connection)", err)
			}
			closed = true
		case <-tick.C:
			io.WriteString(conn, "a") // a slow header byte
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("slowloris connection lived %s; header timeout is 300ms", d)
	}
	if n := b.hits.Load(); n != 0 {
		t.Fatalf("backend saw %d requests", n)
	}
}

func TestHostileSpoofedXFFIgnoredForHashKey(t *testing.T) {
	b := newBackend(t, "b1", nil)
	// Untrusted peer: X-Forwarded-For is not believed.
	p := hostileProxy(t, b, nil, proxyOpts{})
	req, _ := http.NewRequest(http.MethodGet, "http://demo.test/", nil)
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	e, err := p.s.Explain(req, netip.MustParseAddr("192.0.2.7"))
	if err != nil {
		t.Fatal(err)
	}
	if e.ClientIP != "192.0.2.7" {
		t.Fatalf("untrusted peer: client ip %s, want the peer 192.0.2.7", e.ClientIP)
	}
	get(t, client(t), p.url+"/", map[string]string{"X-Forwarded-For": "6.6.6.6"})
	if got := b.last().Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Fatalf("backend X-Forwarded-For %q, want 127.0.0.1", got)
	}
	// Trusted peer: the right-most untrusted entry is the client; the chain is kept.
	pt := hostileProxy(t, b, nil, proxyOpts{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}}})
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.1.1.1")
	e, err = pt.s.Explain(req, netip.MustParseAddr("127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if e.ClientIP != "198.51.100.9" {
		t.Fatalf("trusted chain: client ip %s, want 198.51.100.9 (right-most untrusted)", e.ClientIP)
	}
	get(t, client(t), pt.url+"/", map[string]string{"X-Forwarded-For": "198.51.100.9"})
	if got := b.last().Header.Get("X-Forwarded-For"); got != "198.51.100.9, 127.0.0.1" {
		t.Fatalf("backend X-Forwarded-For %q, want %q", got, "198.51.100.9, 127.0.0.1")
	}
}

func TestClientIPRules(t *testing.T) {
	tr, err := ParseTrusted([]string{"10.0.0.0/8", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr
	cases := []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.1", []string{"1.1.1.1"}, "192.0.2.1"},
		{"10.0.0.1", nil, "10.0.0.1"},
		{"10.0.0.1", []string{"1.1.1.1, 2.2.2.2"}, "2.2.2.2"},
		{"10.0.0.1", []string{"1.1.1.1", "2.2.2.2, 10.9.9.9"}, "2.2.2.2"},
		{"10.0.0.1", []string{"garbage, 10.9.9.9"}, "10.9.9.9"},
		{"10.0.0.1", []string{"10.2.2.2,10.3.3.3"}, "10.2.2.2"},
		{"::ffff:127.0.0.1", []string{"2001:db8::1"}, "2001:db8::1"},
	}
	for _, c := range cases {
		if got := ClientIP(ip(c.peer), c.xff, tr); got.String() != c.want {
			t.Errorf("ClientIP(%s, %q) = %s, want %s", c.peer, c.xff, got, c.want)
		}
	}
	if _, err := ParseTrusted([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("bad CIDR accepted")
	}
}

func TestHostileForgedStickyCookieReissued(t *testing.T) {
	b1, b2, b3 := newBackend(t, "b1", nil), newBackend(t, "b2", nil), newBackend(t, "b3", nil)
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b1.addr, 1), inst(b2.addr, 1), inst(b3.addr, 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Balance.Instance = config.InstanceStickyCookie }))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)
	cookieName := "SLUICE_STICKY"
	for _, forged := range []string{"forged", b1.addr.String(), "x.y.z"} {
		res, _ := get(t, c, p.url+"/", map[string]string{"Cookie": cookieName + "=" + forged})
		var issued *http.Cookie
		for _, ck := range res.Cookies() {
			if ck.Name == cookieName {
				issued = ck
			}
		}
		if issued == nil || issued.Value == forged {
			t.Fatalf("forged cookie %q: no fresh cookie issued (Set-Cookie %q)", forged, res.Header.Values("Set-Cookie"))
		}
		// The issued cookie pins its instance.
		first := ""
		for i := 0; i < 10; i++ {
			res, _ := get(t, c, p.url+"/", map[string]string{"Cookie": cookieName + "=" + issued.Value})
			if first == "" {
				first = res.Header.Get("X-Backend")
			}
			if got := res.Header.Get("X-Backend"); got != first {
				t.Fatalf("valid cookie moved from %s to %s", first, got)
			}
			if len(res.Cookies()) != 0 {
				t.Fatalf("valid cookie re-issued: %q", res.Header.Values("Set-Cookie"))
			}
		}
	}
}

func TestHostileH2CUpgradeNotPerformed(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "h2c")
			w.WriteHeader(http.StatusSwitchingProtocols)
			return
		}
		io.WriteString(w, "plain")
	})
	p := hostileProxy(t, b, nil, proxyOpts{})
	status, rest := rawExchange(t, p.addr, "GET / HTTP/1.1\r\nHost: demo.test\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
	if !strings.HasPrefix(status, "HTTP/1.1 200") || !strings.HasSuffix(rest, "plain") {
		t.Fatalf("h2c upgrade: %q ... %q, want a plain 200", status, rest)
	}
	r := b.last()
	if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
		t.Fatalf("backend saw the upgrade offer: %v", r.Header)
	}
}

func TestWebSocketUpgradePassesThrough(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want websocket", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		line, _ := brw.ReadString('\n')
		io.WriteString(conn, "echo:"+line)
	})
	p := hostileProxy(t, b, nil, proxyOpts{})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: demo.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", res.StatusCode)
	}
	io.WriteString(conn, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:ping\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
}

// TestWebSocketBackendClosesWhileClientSends: the backend ends the tunnel
// while the client is still sending. net/http's upgrade path closes the
// client side when the backend's direction ends, without waiting for the
// copier of the client's direction; on the fasthttp front that connection
// belongs to fasthttp, which recycles it once its hijack handler returns. A
// Read after that was a nil dereference (CI, under -race: a data race on
// fasthttp's hijackConn, then SIGSEGV). The client must see the tunnel end
// and the proxy must go on serving (without the fix this test panics in
// its first round).
func TestWebSocketBackendClosesWhileClientSends(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			io.WriteString(w, "plain")
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nbye\n")
		conn.Close()
	})
	p := hostileProxy(t, b, nil, proxyOpts{})
	for round := 0; round < 20; round++ {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: demo.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		// Keep the client's direction busy while the backend's ends.
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			chunk := []byte(strings.Repeat("x", 512))
			for i := 0; i < 2000; i++ {
				if _, err := conn.Write(chunk); err != nil {
					return
				}
			}
		}()
		// The proxy closes the client's socket with the client's bytes
		// unread, so the kernel may answer with a reset that overtakes the
		// tunnel's last bytes: a reset is a clean end here too.
		reset := func(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		switch {
		case err != nil && !reset(err):
			t.Fatalf("round %d: %v", round, err)
		case err == nil && res.StatusCode != http.StatusSwitchingProtocols:
			t.Fatalf("round %d: status %d, want 101", round, res.StatusCode)
		case err == nil:
			// The tunnel ends with the first direction that ends: the
			// backend's "bye" may be cut when the client's direction fails
			// first (writing to the closed backend). Whatever arrives is a
			// prefix of it, then the end.
			rest, err := io.ReadAll(br)
			if err != nil && !reset(err) || !strings.HasPrefix("bye\n", string(rest)) {
				t.Fatalf("round %d: through the tunnel: %q %v", round, rest, err)
			}
		}
		conn.Close()
		<-sent
	}
	// The proxy still serves.
	if status, _ := rawExchange(t, p.addr, "GET / HTTP/1.1\r\nHost: demo.test\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("after the tunnels: answered %q, want 200", status)
	}
}

// An h2c offer is dropped whole on both fronts, its settings field too when
// Connection does not list it (forward's hop-by-hop rules would not drop
// it): the fasthttp front's adapter tells ServeHTTP of the Upgrade field
// without a map access, and must not hide it.
func TestH2COfferDroppedOnBothFronts(t *testing.T) {
	for _, kind := range []string{FrontStd, FrontFastHTTP} {
		b := newBackend(t, "b1", nil)
		p := hostileProxy(t, b, nil, proxyOpts{opts: Options{UpstreamClient: UpstreamFast}, frontKind: kind})
		status, _ := rawExchange(t, p.addr, "GET / HTTP/1.1\r\nHost: demo.test\r\nUpgrade: h2c\r\nHttp2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nConnection: close\r\n\r\n")
		if !strings.HasPrefix(status, "HTTP/1.1 200") {
			t.Fatalf("%s: h2c offer answered %q, want 200", kind, status)
		}
		if r := b.last(); r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
			t.Errorf("%s: backend saw the upgrade offer: %v", kind, r.Header)
		}
	}
}

// The fasthttp front hands forward the request's fields in the client's
// order (requestFields) rather than its header map: the backend sees what
// it sees through the std front, repeated names, names Connection lists
// (in two fields), Te and the proxy's own fields included.
func TestFastFrontFieldsForwardedAsOnStd(t *testing.T) {
	raw := "GET /f HTTP/1.1\r\nHost: demo.test\r\nX-A: 1\r\nConnection: X-B\r\nX-B: 2\r\nTe: gzip\r\nX-A: 3\r\nKeep-Alive: 5\r\n" +
		"Connection: x-c\r\nX-C: c\r\nTe: trailers\r\nForwarded: for=x\r\nX-Forwarded-For: 6.6.6.6\r\nCookie: a=1; b=2\r\nUser-Agent: ua\r\nConnection: close\r\n\r\n"
	var seen []string
	for _, kind := range []string{FrontStd, FrontFastHTTP} {
		b := newBackend(t, "b1", nil)
		p := hostileProxy(t, b, nil, proxyOpts{opts: Options{UpstreamClient: UpstreamFast}, frontKind: kind})
		if status, _ := rawExchange(t, p.addr, raw); !strings.HasPrefix(status, "HTTP/1.1 200") {
			t.Fatalf("%s: %q, want 200", kind, status)
		}
		r := b.last()
		keys := make([]string, 0, len(r.Header))
		for k := range r.Header {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var sb strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&sb, "%s=%q ", k, r.Header[k])
		}
		seen = append(seen, sb.String())
	}
	if seen[0] != seen[1] {
		t.Errorf("backend saw through the std front:\n%s\nthrough the fasthttp front:\n%s", seen[0], seen[1])
	}
	if want := `Te=["trailers"] User-Agent=["ua"] X-A=["1" "3"]`; !strings.Contains(seen[1], want) {
		t.Errorf("backend saw %s, want it to hold %s", seen[1], want)
	}
}
