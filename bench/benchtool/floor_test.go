package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// floorBackends are two backends answering their name and a request count.
func floorBackends(t *testing.T) (*weighted, func() map[string]int) {
	var mu sync.Mutex
	seen := map[string]int{}
	var addrs []string
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name]++
			n := seen[name]
			mu.Unlock()
			body := fmt.Sprintf("%s %d %s", name, n, r.URL.Path)
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	bs, err := parseWeighted(addrs[0] + "=3," + addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	return bs, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range seen {
			out[k] = v
		}
		return out
	}
}

// relayChecks sends requests over keep-alive connections to addr and checks
// each answer, then that a request the stick does not handle (one with a
// body) ends its connection.
func relayChecks(t *testing.T, addr string, seen func() map[string]int) {
	t.Helper()
	for conn := range 4 { // weights 3 and 1, smooth: a, a, b, a
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		for i := range 3 {
			path := fmt.Sprintf("/c%d/r%d", conn, i)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: bench.test\r\n\r\n", path)
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("connection %d, request %d: %v", conn, i, err)
			}
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatal(err)
			}
			want := "a"
			if conn == 2 {
				want = "b"
			}
			if f := strings.Fields(string(body)); res.StatusCode != 200 || len(f) != 3 || f[0] != want || f[2] != path {
				t.Fatalf("connection %d, request %d: %d %q, want 200 from %s for %s", conn, i, res.StatusCode, body, want, path)
			}
		}
		c.Close()
	}
	if got := seen(); got["a"] != 9 || got["b"] != 3 {
		t.Fatalf("backends saw %v, want a 9 and b 3", got)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: bench.test\r\nContent-Length: 2\r\n\r\nhi")
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a request with a body: read %d bytes, %v; want the connection closed", n, err)
	}
}

func TestFloorRelays(t *testing.T) {
	bs, seen := floorBackends(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveFloor(ctx, ln, bs) }()
	relayChecks(t, ln.Addr().String(), seen)
	idle, err := net.Dial("tcp", ln.Addr().String()) // closed by the stop
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serveFloor: %v", err)
	}
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a connection open at the stop: %v, want it closed", err)
	}
}

func TestEvfloorRelays(t *testing.T) {
	bs, seen := floorBackends(t)
	ln, err := evListen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ln)
	sa, err := syscall.Getsockname(ln)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	var stop [2]int
	if err := syscall.Pipe2(stop[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(stop[0])
	defer syscall.Close(stop[1])
	done := make(chan error, 1)
	go func() { done <- runEvfloor(ln, stop[0], bs) }()
	relayChecks(t, addr, seen)
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idle.Write([]byte("GET / HTTP/1.1\r\n")) // half a request: accepted, then the stop
	syscall.Write(stop[1], []byte{1})
	if err := <-done; err != nil {
		t.Fatalf("runEvfloor: %v", err)
	}
	idle.SetDeadline(time.Now().Add(10 * time.Second))
	// Closed with half a request unread (or never accepted): a reset.
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection open at the stop: %v, want it closed", err)
	}
}

func TestParseWeightedRefusesABadWeight(t *testing.T) {
	for _, s := range []string{"127.0.0.1:1=0", "127.0.0.1:1=x", "127.0.0.1:1=-2"} {
		if _, err := parseWeighted(s); err == nil || !strings.Contains(err.Error(), "weight of at least 1") {
			t.Errorf("parseWeighted(%q) err = %v, want one naming the weight rule", s, err)
		}
	}
}
