package lbproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/proxy/internal/connlimit"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// dialFrom opens a client connection from the loopback IP from and asks
// for one page (the connection then idles), closed at cleanup.
func dialFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func askOnce(c net.Conn) error {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "from-file" {
		return fmt.Errorf("answer %d %q", res.StatusCode, b)
	}
	return nil
}

func readsEOF(t *testing.T, c net.Conn, name string) {
	t.Helper()
	var b [1]byte
	if n, err := c.Read(b[:]); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %d bytes, %v; want EOF (closed by the proxy)", name, n, err)
	}
}

// Issue 23: the client connection limits through lbproxy — per IP a new
// connection over the limit is refused, at the total the oldest idle one is
// closed — with exact metrics.
func TestClientConnLimitsAndMetrics(t *testing.T) {
	path, _ := stateFile(t)
	r := start(t, Config{ConfigFile: path, MaxClientConns: 2, MaxClientConnsPerIP: 1})
	addr := r.addrs.HTTP
	metrics := func(want ...string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, "client connection metrics", func() error {
			_, m, _ := httpGet(t, "http://"+r.addrs.Admin+"/metrics", "")
			for _, w := range want {
				if !strings.Contains(m, w+"\n") {
					return fmt.Errorf("metrics lack %q", w)
				}
			}
			return nil
		})
	}
	a := dialFrom(t, addr, "127.0.0.2")
	if err := askOnce(a); err != nil {
		t.Fatal(err)
	}
	// The proxy marks a connection idle just after its answer left: wait for
	// it, so that a is idle before b (the eviction takes the oldest idle).
	metrics("sluice_proxy_client_conns_idle 1")
	readsEOF(t, dialFrom(t, addr, "127.0.0.2"), "127.0.0.2's second (over the per-IP limit)")
	b := dialFrom(t, addr, "127.0.0.3")
	if err := askOnce(b); err != nil {
		t.Fatal(err)
	}
	metrics("sluice_proxy_client_conns 2", "sluice_proxy_client_conns_idle 2", "sluice_proxy_client_conns_max 2",
		`sluice_proxy_client_conns_rejected_total{reason="per_ip"} 1`, `sluice_proxy_client_conns_rejected_total{reason="max"} 0`,
		"sluice_proxy_client_conns_evicted_total 0")
	c := dialFrom(t, addr, "127.0.0.4") // a is the oldest idle
	if err := askOnce(c); err != nil {
		t.Fatal(err)
	}
	readsEOF(t, a, "127.0.0.2's first (oldest idle)")
	if err := askOnce(b); err != nil {
		t.Fatalf("127.0.0.3's connection after the eviction: %v", err)
	}
	metrics("sluice_proxy_client_conns 2", `sluice_proxy_client_conns_rejected_total{reason="per_ip"} 1`,
		`sluice_proxy_client_conns_rejected_total{reason="max"} 0`, "sluice_proxy_client_conns_evicted_total 1")
}

func TestClientConnLimitsChecked(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxClientConns: -2}, "max client conns -2: want -1 (no limit), 0 (from the open-file limit) or a positive count"},
		{Config{MaxClientConnsPerIP: -1}, "max client conns per IP -1: want 0 (no limit) or a positive count"},
	} {
		if err := c.cfg.checkConnLimits(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	cfg := Config{}
	if err := cfg.checkConnLimits(); err != nil || cfg.MaxClientConns < 1 {
		t.Fatalf("default: %v, MaxClientConns %d; want one derived from the open-file limit", err, cfg.MaxClientConns)
	}
}

// A total limit above the open-file limit starts, with a warning naming both.
func TestClientConnLimitAboveFDLimitWarns(t *testing.T) {
	fds, ok := connlimit.FDLimit()
	if !ok || fds >= 1<<30 {
		t.Fatalf("open-file limit %d (%v): want one below 2^30 to test above it", fds, ok)
	}
	path, _ := stateFile(t)
	var logs syncbuf.Buffer
	start(t, Config{ConfigFile: path, MaxClientConns: 1 << 30, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	want := fmt.Sprintf(`"msg":"--max-client-conns is above the open-file limit (RLIMIT_NOFILE): accepts fail (EMFILE) before it is reached","proxy_cluster":"BFE1","id":"p1","max_client_conns":1073741824,"fd_limit":%d}`, fds)
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("log:\n%s\nwant %s", logs.String(), want)
	}
}
