package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/testkit/poll"
)

// The sluice HTTP/2 server's own tests: a raw HTTP/2 client (x/net's
// Framer) speaks to a TLSFront with --h2-server sluice in front of one
// backend, frame by frame.

// sluiceFront is a TLS front with the sluice HTTP/2 server before backend h;
// tune (if set) changes the server's limits.
func sluiceFront(t *testing.T, h http.HandlerFunc, tune func(*h2Server)) (*TLSFront, string, *x509.CertPool) {
	t.Helper()
	b := newBackend(t, "b1", h)
	snap := oneBackendSnapshot(b)
	h2TestTune = tune
	defer func() { h2TestTune = nil }()
	tf, addr, pool := tlsProxyWith(t, FrontFastHTTP, snap, FrontOptions{H2Server: H2ServerSluice})
	if tf.h2s == nil {
		t.Fatal("no sluice HTTP/2 server")
	}
	return tf, addr, pool
}

// h2raw is a raw HTTP/2 client connection.
type h2raw struct {
	t    *testing.T
	conn *tls.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder

	answers map[uint32]*h2answer
}

// dialH2 connects, sends the preface and SETTINGS (settings), and reads
// up to the server's SETTINGS, which it acknowledges.
func dialH2(t *testing.T, addr string, pool *x509.CertPool, settings ...http2.Setting) *h2raw {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return dialH2Over(t, raw, pool, settings...)
}

// dialH2Over is dialH2 over the connection raw.
func dialH2Over(t *testing.T, raw net.Conn, pool *x509.CertPool, settings ...http2.Setting) *h2raw {
	t.Helper()
	conn := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"h2"}})
	t.Cleanup(func() { conn.Close() })
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	c := &h2raw{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	f := c.next()
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return c
}

// next is the next frame (at most 10 s away); a connection WINDOW_UPDATE
// and SETTINGS ACK are skipped.
func (c *h2raw) next() http2.Frame {
	c.t.Helper()
	for {
		f, err := c.read()
		if err != nil {
			c.t.Fatalf("reading a frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				continue
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
		}
		return f
	}
}

func (c *h2raw) read() (http2.Frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return c.fr.ReadFrame()
}

// request opens stream id: GET (or method, when set) path, END_STREAM
// when end.
func (c *h2raw) request(id uint32, method, path string, end bool, extra ...string) {
	c.t.Helper()
	c.hbuf.Reset()
	kv := append([]string{":method", method, ":scheme", "https", ":authority", "demo.test", ":path", path}, extra...)
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// answer reads stream id's answer to its end: status and body (the
// frames of other streams met meanwhile are kept for their own answer).
// Any stream's reset fails the test.
func (c *h2raw) answer(id uint32) (int, string) {
	c.t.Helper()
	return c.answerOf(id, false)
}

// answerKept is answer on a connection that must stay open: GOAWAY fails
// the test, and only stream id's reset does (another stream's reset, the
// end of an unread request body, is skipped).
func (c *h2raw) answerKept(id uint32) (int, string) {
	c.t.Helper()
	return c.answerOf(id, true)
}

func (c *h2raw) answerOf(id uint32, kept bool) (int, string) {
	c.t.Helper()
	if c.answers == nil {
		c.answers = make(map[uint32]*h2answer)
	}
	for {
		if a := c.answers[id]; a != nil && a.done {
			return a.status, a.body.String()
		}
		f := c.next()
		if g, ok := f.(*http2.GoAwayFrame); ok && kept {
			c.t.Fatalf("GOAWAY %v (last stream %d) while stream %d was answered, want the connection kept", g.ErrCode, g.LastStreamID, id)
		}
		sid := f.Header().StreamID
		if sid == 0 {
			continue
		}
		a := c.answers[sid]
		if a == nil {
			a = &h2answer{}
			c.answers[sid] = a
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if a.status == 0 {
				a.status, _ = strconv.Atoi(f.PseudoValue("status"))
			}
			a.done = f.StreamEnded()
		case *http2.DataFrame:
			a.body.Write(f.Data())
			a.done = f.StreamEnded()
		case *http2.RSTStreamFrame:
			if !kept || sid == id {
				c.t.Fatalf("stream %d reset: %v", sid, f.ErrCode)
			}
		}
	}
}

type h2answer struct {
	status int
	body   strings.Builder
	done   bool
}

// expectReset reads until stream id is reset and answers its code.
func (c *h2raw) expectReset(id uint32) http2.ErrCode {
	c.t.Helper()
	for {
		f := c.next()
		if rst, ok := f.(*http2.RSTStreamFrame); ok && rst.StreamID == id {
			return rst.ErrCode
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			c.t.Fatalf("GOAWAY %v, want RST_STREAM on stream %d", g.ErrCode, id)
		}
	}
}

// expectGoAway reads until GOAWAY.
func (c *h2raw) expectGoAway() *http2.GoAwayFrame {
	c.t.Helper()
	for {
		if g, ok := c.next().(*http2.GoAwayFrame); ok {
			return g
		}
	}
}

// bigBackend answers /big with n bytes of 'x', /hold when released (or
// canceled), /echo with the length of the request body, anything else "ok".
func bigBackend(n int, release <-chan struct{}, arrived chan<- struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(n))
			w.Write(bytes.Repeat([]byte("x"), n))
		case "/hold":
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "held")
		case "/echo":
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			fmt.Fprintf(w, "%d", len(b))
		default:
			io.WriteString(w, "ok")
		}
	}
}

// A small answer is HEADERS then one DATA with END_STREAM, 200 "ok", with
// the Content-Length net/http's server would give.
func TestSluiceH2Answer(t *testing.T) {
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), nil)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	h, ok := c.next().(*http2.MetaHeadersFrame)
	if !ok || h.PseudoValue("status") != "200" || h.StreamEnded() {
		t.Fatalf("first frame %v, want HEADERS 200 without END_STREAM", h)
	}
	var cl string
	for _, f := range h.RegularFields() {
		if f.Name == "content-length" {
			cl = f.Value
		}
	}
	if cl != "2" {
		t.Fatalf("content-length %q, want 2", cl)
	}
	d, ok := c.next().(*http2.DataFrame)
	if !ok || string(d.Data()) != "ok" || !d.StreamEnded() {
		t.Fatalf("second frame %v, want DATA \"ok\" with END_STREAM", d)
	}
}

// The answer's DATA never exceeds the client's stream window: with 100
// bytes of window, 100 bytes come and then nothing until WINDOW_UPDATE.
func TestSluiceH2ResponseFlowControl(t *testing.T) {
	_, addr, pool := sluiceFront(t, bigBackend(1000, nil, nil), nil)
	c := dialH2(t, addr, pool, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	c.request(1, "GET", "/big", true)
	got := 0
	if h, ok := c.next().(*http2.MetaHeadersFrame); !ok || h.PseudoValue("status") != "200" {
		t.Fatalf("want HEADERS 200, got %v", h)
	}
	for got < 100 {
		d, ok := c.next().(*http2.DataFrame)
		if !ok {
			t.Fatalf("want DATA, got %v", d)
		}
		got += len(d.Data())
	}
	if got != 100 {
		t.Fatalf("%d bytes sent on a window of 100", got)
	}
	// Nothing more until the window opens: a PING's ACK comes first.
	if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	if p, ok := c.next().(*http2.PingFrame); !ok || !p.IsAck() {
		t.Fatalf("frame %v before the PING's ACK, want the ACK (window exhausted)", p)
	}
	if err := c.fr.WriteWindowUpdate(1, 900); err != nil {
		t.Fatal(err)
	}
	for got < 1000 {
		d, ok := c.next().(*http2.DataFrame)
		if !ok {
			t.Fatalf("want DATA, got %v", d)
		}
		got += len(d.Data())
		if got == 1000 && !d.StreamEnded() {
			t.Fatal("the last DATA has no END_STREAM")
		}
	}
	if got != 1000 {
		t.Fatalf("%d bytes, want 1000", got)
	}
}

// A client sending more than the stream window allows gets RST_STREAM
// FLOW_CONTROL_ERROR; more than the connection window: GOAWAY.
func TestSluiceH2RequestFlowControl(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 4)
	defer close(release)
	_, addr, pool := sluiceFront(t, bigBackend(0, release, arrived), func(s *h2Server) { s.streamWin, s.connWin = 1000, 1<<20 })
	c := dialH2(t, addr, pool)
	c.request(1, "POST", "/echo", false)
	if err := c.fr.WriteData(1, false, make([]byte, 1001)); err != nil {
		t.Fatal(err)
	}
	if code := c.expectReset(1); code != http2.ErrCodeFlowControl {
		t.Fatalf("RST_STREAM %v, want FLOW_CONTROL_ERROR", code)
	}
	// The connection lives on.
	c.request(3, "GET", "/", true)
	if st, body := c.answer(3); st != 200 || body != "ok" {
		t.Fatalf("after the reset: %d %q", st, body)
	}

	_, addr, pool = sluiceFront(t, bigBackend(0, release, arrived), func(s *h2Server) { s.streamWin, s.connWin = 1<<20, 65535 })
	c = dialH2(t, addr, pool)
	c.request(1, "POST", "/echo", false)
	if err := c.fr.WriteData(1, false, make([]byte, 65536)); err != nil {
		t.Fatal(err)
	}
	if g := c.expectGoAway(); g.ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("GOAWAY %v, want FLOW_CONTROL_ERROR", g.ErrCode)
	}
}

// A request body larger than both windows is streamed to the backend whole
// (the server gives the windows back as the handler reads).
func TestSluiceH2RequestBodyStreams(t *testing.T) {
	for _, small := range []bool{true, false} { // 64 KiB windows, and lbproxy's
		tune := func(s *h2Server) { s.streamWin, s.connWin = 65535, 65535 }
		n := 300_000
		if !small {
			tune, n = nil, 5_000_000
		}
		t.Run(fmt.Sprintf("windows-64k-%v", small), func(t *testing.T) { requestBodyStreams(t, tune, n) })
	}
}

func requestBodyStreams(t *testing.T, tune func(*h2Server), n int) {
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), tune)
	cl := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "demo.test"},
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"h2"}}}
			return d.DialContext(ctx, "tcp", addr)
		}}}
	defer cl.CloseIdleConnections()
	for _, cl64 := range []int{n, -1} { // with a Content-Length, and without
		req, _ := http.NewRequest("POST", "https://demo.test/echo", io.MultiReader(bytes.NewReader(make([]byte, n))))
		req.ContentLength = int64(cl64)
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.ProtoMajor != 2 || res.StatusCode != 200 || string(body) != strconv.Itoa(n) {
			t.Fatalf("content-length %d: %s %d %q, want HTTP/2 200 %d", cl64, res.Proto, res.StatusCode, body, n)
		}
	}
}

// MAX_CONCURRENT_STREAMS: the stream above the limit is refused
// (RST_STREAM PROTOCOL_ERROR), the open ones are answered.
func TestSluiceH2StreamLimit(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 4)
	_, addr, pool := sluiceFront(t, bigBackend(0, release, arrived), func(s *h2Server) { s.maxStreams = 3 })
	c := dialH2(t, addr, pool)
	for _, id := range []uint32{1, 3, 5} {
		c.request(id, "GET", "/hold", true)
		<-arrived
	}
	c.request(7, "GET", "/hold", true)
	if code := c.expectReset(7); code != http2.ErrCodeProtocol && code != http2.ErrCodeRefusedStream {
		t.Fatalf("stream 7: RST_STREAM %v, want PROTOCOL_ERROR or REFUSED_STREAM", code)
	}
	close(release)
	for _, id := range []uint32{1, 3, 5} {
		if st, body := c.answer(id); st != 200 || body != "held" {
			t.Fatalf("stream %d: %d %q", id, st, body)
		}
	}
	c.request(9, "GET", "/", true)
	if st, _ := c.answer(9); st != 200 {
		t.Fatalf("stream 9 after the others ended: %d", st)
	}
}

// RST_STREAM from the client cancels the request (the backend sees its
// context end) and the connection serves on.
func TestSluiceH2ClientReset(t *testing.T) {
	arrived := make(chan struct{}, 1)
	canceled := make(chan struct{}, 1)
	_, addr, pool := sluiceFront(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			arrived <- struct{}{}
			<-r.Context().Done()
			canceled <- struct{}{}
			return
		}
		io.WriteString(w, "ok")
	}, nil)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/hold", true)
	<-arrived
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend request was not canceled by RST_STREAM")
	}
	c.request(3, "GET", "/", true)
	if st, body := c.answer(3); st != 200 || body != "ok" {
		t.Fatalf("after the reset: %d %q", st, body)
	}
}

// Shutdown: GOAWAY (NO_ERROR, the last stream id) at once; the open stream
// is still answered; then the connection closes and Shutdown returns nil.
func TestSluiceH2GracefulShutdown(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	tf, addr, pool := sluiceFront(t, bigBackend(0, release, arrived), nil)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/hold", true)
	<-arrived
	done := make(chan error, 1)
	go func() { done <- tf.Shutdown(context.Background()) }()
	g := c.expectGoAway()
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR 1", g.ErrCode, g.LastStreamID)
	}
	c.request(3, "GET", "/", true) // above the last stream: not served
	close(release)
	if st, body := c.answer(1); st != 200 || body != "held" {
		t.Fatalf("the open stream: %d %q", st, body)
	}
	for {
		f, err := c.read()
		if err != nil {
			break // closed
		}
		if f.Header().StreamID == 3 {
			t.Fatalf("stream 3 (after GOAWAY) answered: %v", f)
		}
	}
	shutdownReturned(t, done)
}

// A header list above MaxHeaderBytes (fields each under it) is answered
// 431, as net/http does.
func TestSluiceH2HeaderListLimit(t *testing.T) {
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), func(s *h2Server) { s.maxHeader = 1000 })
	c := dialH2(t, addr, pool, http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 14})
	var big []string
	for i := range 20 {
		big = append(big, fmt.Sprintf("x-big-%d", i), strings.Repeat("a", 100))
	}
	c.request(1, "GET", "/", true, big...)
	if st, _ := c.answer(1); st != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", st)
	}
	c.request(3, "GET", "/", true, "x-small", "a")
	if st, _ := c.answer(3); st != 200 {
		t.Fatalf("status %d after a 431, want 200", st)
	}
}

// A client that reads nothing (window 0): the handler waits for the window
// and gives up at the client's RST_STREAM; nothing of the body was sent.
func TestSluiceH2SlowReader(t *testing.T) {
	const n = 1 << 20
	tf, addr, pool := sluiceFront(t, bigBackend(n, nil, nil), nil)
	c := dialH2(t, addr, pool, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.request(1, "GET", "/big", true)
	if h, ok := c.next().(*http2.MetaHeadersFrame); !ok || h.PseudoValue("status") != "200" {
		t.Fatalf("want HEADERS 200, got %v", h)
	}
	if err := c.fr.WritePing(false, [8]byte{2}); err != nil {
		t.Fatal(err)
	}
	if p, ok := c.next().(*http2.PingFrame); !ok || !p.IsAck() {
		t.Fatalf("frame %v before the PING's ACK: DATA on a window of 0?", p)
	}
	hc := onlyConn(t, tf)
	hc.mu.Lock()
	buffered := len(hc.wbuf)
	hc.mu.Unlock()
	if buffered != 0 {
		t.Fatalf("%d bytes queued for a client with no window", buffered)
	}
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "the handler ended", func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return hc.running == 0
	})
}

// An idle connection (its stream answered) holds no write buffer, and
// ConnState saw it go active and idle.
func TestSluiceH2IdleHoldsNoBuffer(t *testing.T) {
	tf, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), nil)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	if st, _ := c.answer(1); st != 200 {
		t.Fatalf("status %d", st)
	}
	hc := onlyConn(t, tf)
	poll.EventuallyTrue(t, 10*time.Second, "idle", func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		return len(hc.streams) == 0 && !hc.active && cap(hc.wbuf) == 0 && cap(hc.spare) == 0
	})
}

// Errors of a front option name the option, the value and the rule.
func TestTLSFrontRejectsUnknownH2Server(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")})})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := testCertificate(t)
	_, err = s.TLSFront(FrontStd, FrontOptions{Certificates: []tls.Certificate{cert}, H2Server: "nginx"})
	if err == nil || err.Error() != `server: H2Server "nginx": want "sluice" or "xnet"` {
		t.Fatalf("err = %v", err)
	}
}

// onlyConn is the sluice HTTP/2 server's one connection.
func onlyConn(t *testing.T, tf *TLSFront) *h2conn {
	t.Helper()
	tf.h2s.mu.Lock()
	defer tf.h2s.mu.Unlock()
	if len(tf.h2s.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(tf.h2s.conns))
	}
	for c := range tf.h2s.conns {
		return c
	}
	return nil
}

// A backend that answers without reading the request body: the answer
// still reaches the client, whole.
func TestSluiceH2AnswerBeforeBody(t *testing.T) {
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), nil)
	cl := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true,
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"h2"}}}
			return d.DialContext(ctx, "tcp", addr)
		}}}
	defer cl.CloseIdleConnections()
	req, _ := http.NewRequest("POST", "https://demo.test/", bytes.NewReader(make([]byte, 5_000_000)))
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("%d %q %v, want 200 ok", res.StatusCode, body, err)
	}
}

// A client gone cancels the context of each stream still open: the
// streams' parent is not cancelable, close cancels them one by one.
func TestSluiceH2DisconnectCancelsStreams(t *testing.T) {
	arrived, canceled := make(chan struct{}, 2), make(chan struct{}, 2)
	tune := func(s *h2Server) {
		s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-r.Context().Done()
			canceled <- struct{}{}
		})
	}
	_, addr, pool := sluiceFront(t, bigBackend(0, nil, nil), tune)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", true)
	c.request(3, "GET", "/", true)
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the handlers did not start")
		}
	}
	c.conn.Close()
	for i := 0; i < 2; i++ {
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 handlers saw their context canceled after the client left", i)
		}
	}
}

// shutdownReturned waits (10 s at most) for Shutdown's answer on done: nil.
func shutdownReturned(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// A client that resets a stream while the proxy reads its request body is
// gone: the request ends 499 client-closed and nothing is answered, and
// the connection's other streams go on. It was answered 400 with
// "Connection: close", which GOAWAYed the whole connection (h2spec's
// generic/3.4, HEADERS without END_STREAM, RST_STREAM and PING, failed one
// run in ten when the GOAWAY beat the PING's answer). Also run on the
// xnet server (TestXNetH2ServerSuite).
func TestH2ResetDuringBodyKeepsTheConnection(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	snap := oneBackendSnapshot(b)
	tf, addr, pool := tlsProxyWith(t, FrontFastHTTP, snap, FrontOptions{})
	s := tf.std.Handler.(*Server)
	c := dialH2(t, addr, pool)
	c.request(1, "GET", "/", false) // its body is still to come: buffered for a retry
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "the reset request is ended client-closed", func() bool {
		return testutil.ToFloat64(s.metrics.generated.WithLabelValues("main", CodeClientClosed)) == 1
	})
	c.request(3, "GET", "/", true)
	if st, body := c.answerKept(3); st != 200 || body != "ok" {
		t.Fatalf("stream 3: %d %q, want 200 ok", st, body)
	}
}

// A 413 on one stream (a declared body over --max-body-bytes) ends that
// stream alone: no GOAWAY, the next stream is answered, on both servers
// (as nginx and Envoy; "Connection: close" GOAWAYed the connection).
func TestH2BodyTooLargeKeepsTheConnection(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	snap := oneBackendSnapshot(b)
	_, addr, pool := tlsProxyTuned(t, FrontFastHTTP, snap, FrontOptions{}, func(hs *http.Server) { hs.Handler.(*Server).maxBody = 1000 })
	c := dialH2(t, addr, pool)
	c.request(1, "POST", "/", false, "content-length", "100000")
	if st, _ := c.answerKept(1); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("stream 1: %d, want 413", st)
	}
	c.request(3, "GET", "/", true)
	if st, body := c.answerKept(3); st != 200 || body != "ok" {
		t.Fatalf("stream 3 after the 413: %d %q, want 200 ok", st, body)
	}
}
