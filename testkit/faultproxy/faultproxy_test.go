package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every line back; it stops at cleanup.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	line, err := r.ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return line, err
}

func TestPassThrough(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	got, err := roundTrip(t, c, r, "hello", 10*time.Second)
	if err != nil || got != "hello\n" {
		t.Fatalf("round trip = %q, %v; want hello", got, err)
	}
	if p.Accepted() != 1 {
		t.Fatalf("Accepted = %d, want 1", p.Accepted())
	}
}

func TestBlackholeKeepsConnectionsOpenAndSilent(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if got, err := roundTrip(t, c, r, "a", 10*time.Second); err != nil || got != "a\n" {
		t.Fatalf("before blackhole: %q %v", got, err)
	}
	p.SetMode(Blackhole)
	_, err := roundTrip(t, c, r, "b", 300*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackholed read err = %v, want a deadline timeout (open but silent)", err)
	}
	// A new connection is accepted and stays silent too.
	c2, r2 := dial(t, p)
	if _, err := roundTrip(t, c2, r2, "x", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new blackholed conn err = %v, want deadline timeout", err)
	}
	// Leaving blackhole resets the corrupted connections; new ones work.
	p.SetMode(PassThrough)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("tainted conn after blackhole: err = %v, want reset/EOF", err)
	}
	c3, r3 := dial(t, p)
	if got, err := roundTrip(t, c3, r3, "c", 10*time.Second); err != nil || got != "c\n" {
		t.Fatalf("after blackhole: %q %v", got, err)
	}
}

func TestPauseResumeDeliversLater(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if got, err := roundTrip(t, c, r, "a", 10*time.Second); err != nil || got != "a\n" {
		t.Fatalf("before pause: %q %v", got, err)
	}
	p.Pause()
	if _, err := roundTrip(t, c, r, "b", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("paused read err = %v, want deadline timeout", err)
	}
	p.Resume()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != "b\n" {
		t.Fatalf("after resume: %q %v; want the paused bytes delivered", got, err)
	}
}

func TestRejectAndDropAll(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(t, c, r, "a", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p.DropAll()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after DropAll: err = %v, want reset/EOF", err)
	}
	p.SetMode(Reject)
	// The reset may reach the client during or after the handshake.
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c2.Close()
		if _, err := roundTrip(t, c2, bufio.NewReader(c2), "b", 10*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("rejected conn: err = %v, want reset/EOF", err)
		}
	}
	p.SetMode(PassThrough)
	c3, r3 := dial(t, p)
	if got, err := roundTrip(t, c3, r3, "c", 10*time.Second); err != nil || got != "c\n" {
		t.Fatalf("after reject: %q %v", got, err)
	}
}
