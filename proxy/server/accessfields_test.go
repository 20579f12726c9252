package server

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/poll"
)

// Issue 17 (access log): query, bytes in and out, time to the upstream
// header and attempts are in every line.
func TestAccessLogFields(t *testing.T) {
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(strings.Repeat("x", 1000)))
	})
	var buf syncBuffer
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{opts: Options{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil))}})
	c := client(t)
	start := time.Now()
	if s, body := do(t, c, http.MethodPut, p.url+"/up?a=1&b=2", "r1", "12345"); s != http.StatusOK || len(body) != 1000 {
		t.Fatalf("PUT: %d, %d bytes", s, len(body))
	}
	// The proxy's times are parts of the request the client saw; bounded
	// by it rather than by a fixed second, which a loaded machine can pass.
	took := float64(time.Since(start))
	lines := buf.lines(t)
	if len(lines) != 1 {
		t.Fatalf("%d access lines, want 1", len(lines))
	}
	l := lines[0]
	for k, v := range map[string]any{"query": "a=1&b=2", "bytes_in": 5.0, "bytes_out": 1000.0, "attempts": 1.0, "status": 200.0, "trace_id": ""} {
		if l[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, l[k], v, l)
		}
	}
	if d, _ := l["upstream_header_time"].(float64); d <= 0 || d > took {
		t.Errorf("upstream_header_time = %v, want a positive duration under the request's %v", l["upstream_header_time"], took)
	}
	// The first request dialled; the second reuses the connection.
	d, _ := l["upstream_connect_time"].(float64)
	if os.Getenv(upstreamEnv) != UpstreamStd && (d <= 0 || d > took) {
		t.Errorf("upstream_connect_time = %v on a new connection, want a positive duration under the request's %v", l["upstream_connect_time"], took)
	}
	do(t, c, http.MethodGet, p.url+"/again", "r2", "")
	if l := buf.lines(t)[1]; l["upstream_connect_time"] != 0.0 {
		t.Errorf("upstream_connect_time = %v on a reused connection, want 0", l["upstream_connect_time"])
	}
}

// Issue 17 (access log): a client that leaves before the answer ended is
// logged 499 client-closed, not with the backend's status.
func TestAccessLogClientLeftIs499(t *testing.T) {
	stop := make(chan struct{})
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(64<<20))
		chunk := []byte(strings.Repeat("y", 32<<10))
		for i := 0; i < 2048; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	defer close(stop)
	var buf syncBuffer
	p := newProxy(t, testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{opts: Options{AccessLog: slog.New(slog.NewJSONHandler(&buf, nil))}})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /big HTTP/1.1\r\nHost: demo.test\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("response %v %v", res, err)
	}
	io.ReadFull(res.Body, make([]byte, 1<<10))
	conn.Close() // leaves with most of the 64 MiB unread
	poll.EventuallyTrue(t, 10*time.Second, "an access line for the abandoned request", func() bool {
		buf.mu.Lock()
		defer buf.mu.Unlock()
		return buf.b.Len() > 0
	})
	l := buf.lines(t)[0]
	if l["status"] != float64(StatusClientClosed) || l["error_code"] != CodeClientClosed {
		t.Fatalf("line %v: want status 499 error_code %s", l, CodeClientClosed)
	}
	if n, _ := l["bytes_out"].(float64); n <= 0 || n >= 64<<20 {
		t.Errorf("bytes_out = %v, want part of the body", l["bytes_out"])
	}
}
