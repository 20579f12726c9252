//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

// rawExchange sends raw bytes, then body zero bytes (from another goroutine,
// so that an early answer is read), to addr on a new connection and returns
// everything answered until the proxy closes the connection.
func rawExchange(t *testing.T, addr, raw string, body int) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	go func() {
		chunk := make([]byte, 1<<20)
		for sent := 0; sent < body; sent += len(chunk) {
			if _, err := conn.Write(chunk[:min(len(chunk), body-sent)]); err != nil {
				return // the proxy answered and closed: the rest is not wanted
			}
		}
	}()
	b, _ := io.ReadAll(conn)
	return string(b)
}

// allBackendsTotal is how many requests every backend of the fleet received.
func allBackendsTotal(t *testing.T, f *fleet.Fleet) int64 {
	t.Helper()
	var sum int64
	for _, b := range f.Backends {
		n, err := backendTotal(b)
		if err != nil {
			t.Fatal(err)
		}
		sum += n
	}
	return sum
}

// Catalogue F1–F4, F10, F11, F14: hostile request heads sent as raw bytes to
// a real lbproxy (the default fasthttp front). The figure for each is what
// the client got and how many requests the backends received — exactly the
// number of requests the proxy answered from a backend (0 for a refused
// head) — and how long the answer took (bounded: no hang).
func TestFaultsHostileClients(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	addr := strings.TrimPrefix(f.ProxiesOf("BFE2")[0].URL, "http://")
	const host = "Host: demo.local\r\n"
	cases := []struct {
		id, what string
		raw      string
		body     int // zero bytes streamed after raw
		// status lines wanted, in order; the backends must have received
		// exactly len(want) requests for every "200" among them.
		want []string
	}{
		{"F1", "Content-Length and Transfer-Encoding with a request smuggled in the body",
			"POST /first HTTP/1.1\r\n" + host + "Content-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n" + host + "Connection: close\r\n\r\n",
			0, []string{"HTTP/1.1 200"}},
		{"F2", "two different Content-Length", "POST / HTTP/1.1\r\n" + host + "Content-Length: 4\r\nContent-Length: 40\r\n\r\nabcd", 0, []string{"HTTP/1.1 400"}},
		{"F3", "Transfer-Encoding: gzip, chunked", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 0, []string{"HTTP/1.1 501|HTTP/1.1 400"}},
		{"F3", "two Transfer-Encoding headers", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0, []string{"HTTP/1.1 501|HTTP/1.1 400"}},
		{"F4", "80 KiB of headers (limit 64 KiB)", "GET / HTTP/1.1\r\n" + host + "X-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", 0, []string{"HTTP/1.1 431"}},
		{"F10", "Upgrade: h2c", "GET / HTTP/1.1\r\n" + host + "Connection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", 0, []string{"HTTP/1.1 200"}},
		{"F11", "a 65 MiB body (limit 64 MiB)", "POST / HTTP/1.1\r\n" + host + "Content-Length: 68157440\r\n\r\n", 65 << 20, []string{"HTTP/1.1 413"}},
		{"F14", "60 KiB X-Forwarded-For (the hash key is the client IP)", "GET / HTTP/1.1\r\n" + host + "Connection: close\r\nX-Forwarded-For: " + strings.Repeat("10.1.2.3, ", 6000) + "10.9.9.9\r\n\r\n", 0, []string{"HTTP/1.1 200"}},
	}
	for _, c := range cases {
		before := allBackendsTotal(t, f)
		began := time.Now()
		got := rawExchange(t, addr, c.raw, c.body)
		took := time.Since(began)
		var lines []string
		for _, l := range strings.Split(got, "\r\n") {
			if strings.HasPrefix(l, "HTTP/1.1 ") {
				lines = append(lines, l)
			}
		}
		// Backends count a request when it arrives: poll until the count is
		// the one wanted, then check it stays there (nothing else in flight).
		wantHits := int64(0)
		for _, w := range c.want {
			if w == "HTTP/1.1 200" {
				wantHits++
			}
		}
		var hits int64
		eventually(t, 10*time.Second, c.id+" backend hits", func() error {
			if hits = allBackendsTotal(t, f) - before; hits != wantHits {
				return fmt.Errorf("backends received %d requests, want %d", hits, wantHits)
			}
			return nil
		})
		t.Logf("%s %s: answered %q in %.3f s; backends received %d requests", c.id, c.what, lines, took.Seconds(), hits)
		if len(lines) != len(c.want) {
			t.Errorf("%s: answers %q, want %q", c.id, lines, c.want)
			continue
		}
		for i, w := range c.want {
			ok := false
			for _, alt := range strings.Split(w, "|") {
				ok = ok || strings.HasPrefix(lines[i], alt)
			}
			if !ok {
				t.Errorf("%s: answer %d is %q, want %q", c.id, i, lines[i], w)
			}
		}
		if took > 5*time.Second {
			t.Errorf("%s: the answer took %s", c.id, took)
		}
	}
	// The proxy still serves after all of them.
	if o := do("GET", f.ProxiesOf("BFE2")[0].URL+"/", "10.7.7.7"); o.Err != nil || o.Status != 200 {
		t.Fatalf("after the hostile requests: %d %v", o.Status, o.Err)
	}
}
