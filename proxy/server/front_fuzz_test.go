package server

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// statusLine is what every answer of the front must start with.
var statusLine = regexp.MustCompile(`^HTTP/1\.1 [1-5][0-9][0-9] `)

// FuzzFrontRequestHead sends fuzzed bytes as a client's request (head and
// whatever follows) over a real loopback connection to the fasthttp front
// (the plain listener's default) and half-closes it. Within 5 s the front
// must close the connection; whatever it answered must start with a valid
// HTTP/1.1 status line, and every answer it sent must be one; it never
// panics (the process would die), and a well-formed request on a new
// connection is still served 200 afterwards.
func FuzzFrontRequestHead(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: demo.test\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 3\r\n\r\nabc",
		"POST /p HTTP/1.1\r\nHost: demo.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: demo.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: demo.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"GET http://other.example/a?b=c HTTP/1.1\r\nHost: demo.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: demo.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: demo.test\r\nX-Forwarded-For: 1.2.3.4, ::1, garbage\r\nCookie: a=b; c\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: demo.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: demo.test\r\n\r\nGET /2 HTTP/1.1\r\nHost: demo.test\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"G\x00T / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: demo.test\r\nContent-Length: 99999999999999999999\r\n\r\n",
		"GET / HTTP/1.1\nHost: demo.test\n\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: demo.test\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	var hits atomic.Int64
	be := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go be.Serve(bl)
	f.Cleanup(func() { be.Close() })
	addr := bl.Addr().(*net.TCPAddr).AddrPort()
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(addr, 1)}}, map[string]int{"SC1": 100}, nil))
	p := newProxy(f, snap, proxyOpts{frontKind: FrontFastHTTP, opts: Options{MaxBodyBytes: 1 << 16, UpstreamClient: UpstreamFast},
		front: FrontOptions{ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, MaxHeaderBytes: 8 << 10}})
	f.Fuzz(func(t *testing.T, raw []byte) {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(raw); err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") && !strings.Contains(err.Error(), "broken pipe") {
			t.Fatalf("write: %v", err)
		}
		conn.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(conn)
		if err != nil && !strings.Contains(err.Error(), "reset") {
			if os.IsTimeout(err) {
				t.Fatalf("the front neither answered nor closed within 5 s (got %q)", got)
			}
			t.Fatalf("read: %v", err)
		}
		// Each answer the front sent is a well-formed response.
		br := bufio.NewReader(bytes.NewReader(got))
		for len(got) > 0 {
			peek, _ := br.Peek(13) // "HTTP/1.1 200 "
			if !statusLine.Match(peek) {
				t.Fatalf("answer does not start with a status line: %q (input %q)", got, raw)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("answer is not a valid HTTP/1.1 response: %v: %q (input %q)", err, got, raw)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				break // a response cut short by the close: its head was valid
			}
			if br.Buffered() == 0 {
				break
			}
		}
		// Still serving.
		c2, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		c2.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c2, "GET /alive HTTP/1.1\r\nHost: demo.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("after input %q the front does not serve: %v %v", raw, resp, err)
		}
		resp.Body.Close()
	})
}
