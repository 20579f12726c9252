package forward

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// pipeUpstream is an upstream whose connections are in-memory pipes to a
// backend answering every request "x" (the pool's timers are then the
// bubble's). dials counts the connections made; each backend goroutine
// ends when the upstream closes its end.
func pipeUpstream(t *testing.T, pool config.Pool) (*Upstream, *atomic.Int64) {
	t.Helper()
	var dials atomic.Int64
	dial := func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		c, s := net.Pipe()
		go func() {
			defer s.Close()
			br := bufio.NewReader(s)
			for {
				if _, err := readReq(br); err != nil {
					return
				}
				if _, err := io.WriteString(s, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"); err != nil {
					return
				}
			}
		}()
		return c, nil
	}
	ps := NewPools(Options{DialContext: dial})
	t.Cleanup(ps.Close)
	return ps.Get(netip.MustParseAddrPort("192.0.2.1:80"), pool, config.Timeouts{Connect: config.Duration(2 * time.Second)}), &dials
}

// Idle connections are closed after exactly idle_timeout (fake clock: the
// reaper's timer is the bubble's), and the next request dials anew.
func TestIdleConnectionsReaped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up, dials := pipeUpstream(t, testPool(4, 0, 0, time.Second))
		if s, b, err := get(up, context.Background()); err != nil || s != 200 || b != "x" {
			t.Fatalf("%d %q %v", s, b, err)
		}
		if up.IdleConns() != 1 {
			t.Fatalf("idle %d, want 1", up.IdleConns())
		}
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if up.IdleConns() != 1 {
			t.Fatalf("idle %d 1ns before the idle timeout, want 1", up.IdleConns())
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if up.IdleConns() != 0 {
			t.Fatalf("idle %d at the idle timeout, want 0 (reaped)", up.IdleConns())
		}
		if s, _, err := get(up, context.Background()); err != nil || s != 200 || dials.Load() != 2 {
			t.Fatalf("after the reap: %d %v, %d dials; want 200 on a second connection", s, err, dials.Load())
		}
	})
}

// Over max_conns_per_host the request waits exactly the queue timeout and
// fails with ErrPoolFull; a slot is released when the body is closed.
func TestPoolLimitAndQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up, _ := pipeUpstream(t, testPool(1, 1, 50*time.Millisecond, time.Minute))
		res, err := up.Do(context.Background(), &Request{Method: "GET", URI: "/", Host: "b"}, make(map[string][]string))
		if err != nil {
			t.Fatal(err)
		}
		if up.InUse() != 1 {
			t.Fatalf("in use %d, want 1", up.InUse())
		}
		start := time.Now()
		if _, err := up.Do(context.Background(), &Request{Method: "GET", URI: "/", Host: "b"}, make(map[string][]string)); !errors.Is(err, ErrPoolFull) {
			t.Fatalf("second request: %v, want ErrPoolFull", err)
		}
		if waited := time.Since(start); waited != 50*time.Millisecond {
			t.Fatalf("second request failed after %s, want the queue timeout 50ms", waited)
		}
		io.ReadAll(res.Body)
		res.Body.Close()
		if up.InUse() != 0 {
			t.Fatalf("in use %d after close, want 0", up.InUse())
		}
		if s, _, err := get(up, context.Background()); err != nil || s != 200 {
			t.Fatalf("after release: %d %v", s, err)
		}
	})
}

// An idle pooled connection holds no buffers (they go back to the shared
// pools until its next exchange), and the next exchange on it, which takes
// a pair again, is served on the same connection.
func TestIdleConnectionHoldsNoBuffers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up, dials := pipeUpstream(t, testPool(4, 0, 0, time.Minute))
		for i := range 3 {
			if s, b, err := get(up, context.Background()); err != nil || s != 200 || b != "x" {
				t.Fatalf("request %d: %d %q %v", i, s, b, err)
			}
			up.idleMu.Lock()
			n := len(up.idle)
			var br, bw bool
			if n == 1 {
				br, bw = up.idle[0].br != nil, up.idle[0].bw != nil
			}
			up.idleMu.Unlock()
			if n != 1 || br || bw {
				t.Fatalf("after request %d: %d idle, reader held %v, writer held %v; want 1 idle holding neither", i, n, br, bw)
			}
		}
		if dials.Load() != 1 {
			t.Fatalf("%d dials for 3 requests, want 1 (the idle connection reused)", dials.Load())
		}
	})
}
