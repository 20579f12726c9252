package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// idle opens -conns keep-alive connections to -addr, each sending one GET
// and reading its answer, keeps them open and idle, and prints what the
// server process (-pid) holds per connection: RSS from /proc, and with
// -admin (lbproxy's admin API, --pprof with -token) the Go heap and stack
// from /metrics after a forced collection (/debug/pprof/heap?gc=1).
//
//	benchtool idle -addr 127.0.0.1:28083 -pid 1234 -conns 10000 [-admin 127.0.0.1:29083 -token T] [-tls | -h2]
func idle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	addr := fs.String("addr", "", "server address (loopback)")
	conns := fs.Int("conns", 10000, "idle connections")
	useTLS := fs.Bool("tls", false, "TLS (ALPN http/1.1, any certificate)")
	useH2 := fs.Bool("h2", false, "HTTP/2 over TLS (ALPN h2): one GET, then no open stream")
	profile := fs.String("heap-profile", "", "with -admin: write the heap profile (connections open) to this file")
	mf := memoryFlags(fs, 2*time.Second)
	fs.Parse(args)
	if *addr == "" || mf.pid == 0 {
		return fmt.Errorf("idle: -addr and -pid are required")
	}
	pid, admin, token, label := &mf.pid, &mf.admin, &mf.token, &mf.label
	before, err := measure(*pid, *admin, *token)
	if err != nil {
		return err
	}
	start := time.Now()
	open, err := openIdle(*addr, mf.host, *conns, *useTLS, *useH2)
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	opened := time.Since(start)
	time.Sleep(mf.settle) // let the server settle (a benchmark, not a test)
	after, err := measure(*pid, *admin, *token)
	if err != nil {
		return err
	}
	if *profile != "" && *admin != "" {
		if err := saveProfile("http://"+*admin+"/debug/pprof/heap", *token, *profile); err != nil {
			return err
		}
	}
	n := float64(len(open))
	per := func(k string) string { return perConn(before, after, k, n) }
	for _, m := range []map[string]float64{before, after} { // free heap the runtime has not returned to the OS yet
		if idle, ok := m["go_memstats_heap_idle_bytes"]; ok {
			m["heap_free"] = idle - m["go_memstats_heap_released_bytes"]
		}
	}
	settled, err := mf.settled(before, n)
	if err != nil {
		return err
	}
	fmt.Printf("%-18s conns=%d open_s=%.1f rss_kib/conn=%s heap_alloc_kib/conn=%s heap_inuse_kib/conn=%s stack_kib/conn=%s free_unreleased_kib/conn=%s goroutines=%s rss_mib=%.1f%s\n",
		*label, len(open), opened.Seconds(), per("rss"), per("go_memstats_heap_alloc_bytes"), per("go_memstats_heap_inuse_bytes"),
		per("go_memstats_stack_inuse_bytes"), per("heap_free"), fmtCount(after["go_goroutines"]), after["rss"]/(1<<20), settled)
	return nil
}

// memFlags are the flags idle and idleup share: the process measured and
// how.
type memFlags struct {
	host, admin, token, label string
	pid                       int
	settle, rssWait           time.Duration
}

func memoryFlags(fs *flag.FlagSet, settle time.Duration) *memFlags {
	m := &memFlags{}
	fs.StringVar(&m.host, "host", "bench.test", "Host header")
	fs.IntVar(&m.pid, "pid", 0, "server process whose RSS is read")
	fs.StringVar(&m.admin, "admin", "", "lbproxy admin address: Go heap and stack from /metrics")
	fs.StringVar(&m.token, "token", "", "admin token (--admin-token)")
	fs.StringVar(&m.label, "label", "", "row label")
	fs.DurationVar(&m.settle, "settle", settle, "wait before measuring with the connections idle")
	fs.DurationVar(&m.rssWait, "rss-settle", 0, "after measuring, poll RSS this long and print its low and when it was reached")
	return m
}

// settled polls RSS for -rss-settle and answers its low per connection as
// an output field ("" without -rss-settle).
func (m *memFlags) settled(before map[string]float64, n float64) (string, error) {
	if m.rssWait <= 0 {
		return "", nil
	}
	rss, waited, err := settleRSS(m.pid, m.rssWait)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(" rss_settled_kib/conn=%.2f settled_s=%.1f", (rss-before["rss"])/n/1024, waited.Seconds()), nil
}

// settleRSS polls pid's RSS every 250 ms for max, the connections idle (the
// runtime or lbproxy's --memory-release-interval returning freed heap): the
// lowest RSS seen and when it was seen.
func settleRSS(pid int, max time.Duration) (low float64, at time.Duration, err error) {
	start := time.Now()
	lowAt := start
	for time.Since(start) < max {
		m, err := measure(pid, "", "")
		if err != nil {
			return 0, 0, err
		}
		if low == 0 || m["rss"] < low {
			low, lowAt = m["rss"], time.Now()
		}
		time.Sleep(250 * time.Millisecond) // polling the process's RSS (a benchmark, not a test)
	}
	return low, lowAt.Sub(start), nil
}

// perConn is the growth of gauge k from before to after per connection, in
// KiB ("-" when not measured).
func perConn(before, after map[string]float64, k string, n float64) string {
	a, okA := after[k]
	b, okB := before[k]
	if !okA || !okB {
		return "-"
	}
	return strconv.FormatFloat((a-b)/n/1024, 'f', 2, 64)
}

func fmtCount(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }

// openIdle opens n connections (64 at a time), each answered once.
func openIdle(addr, host string, n int, useTLS, useH2 bool) ([]net.Conn, error) {
	out := make([]net.Conn, n)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	next := make(chan int)
	req := "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := dialIdle(addr, i, useTLS, useH2)
				if err == nil && useH2 {
					err = oneH2GET(c, host)
				} else if err == nil {
					err = oneGET(c, req)
				}
				if err != nil {
					if c != nil {
						c.Close()
					}
					select {
					case errs <- fmt.Errorf("connection %d: %w", i, err):
					default:
					}
					continue
				}
				out[i] = c
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	var kept []net.Conn
	for _, c := range out {
		if c != nil {
			kept = append(kept, c)
		}
	}
	select {
	case err := <-errs:
		return kept, err
	default:
	}
	return kept, nil
}

// dialIdle spreads connections over source addresses 127.0.0.2... (20 000
// each) so that many fit in the ephemeral port range.
func dialIdle(addr string, i int, useTLS, useH2 bool) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second,
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(i/20000), byte(2+i%200))}}
	if useH2 {
		return dialH2(&d, addr)
	}
	if !useTLS {
		return d.Dial("tcp", addr)
	}
	return tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) // #nosec G402: loopback benchmark
}

func oneGET(c net.Conn, req string) error {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, 4096)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil && res.StatusCode != 200 {
		err = fmt.Errorf("status %d", res.StatusCode)
	}
	if err == nil && br.Buffered() > 0 {
		err = fmt.Errorf("%d bytes after the answer", br.Buffered())
	}
	c.SetDeadline(time.Time{})
	return err
}

// measure reads the process's RSS and, with admin, lbproxy's Go memory
// after two collections.
func measure(pid int, admin, token string) (map[string]float64, error) {
	m := map[string]float64{}
	if admin != "" {
		for range 2 { // two collections: sync.Pool's victim cache is dropped at the second
			if err := adminGet("http://"+admin+"/debug/pprof/heap?gc=1", token, nil); err != nil {
				return nil, err
			}
		}
		if err := adminGet("http://"+admin+"/metrics", token, m); err != nil {
			return nil, err
		}
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(st), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m["rss"] = kb * 1024
		}
	}
	return m, nil
}

// adminGet fetches url; with m, it keeps the go_* gauges of the text exposition.
func adminGet(url, token string, m map[string]float64) error {
	return adminFetch(url, token, func(body io.Reader) error {
		if m == nil {
			_, err := io.Copy(io.Discard, body)
			return err
		}
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && strings.HasPrefix(f[0], "go_") {
				if v, err := strconv.ParseFloat(f[1], 64); err == nil {
					m[f[0]] = v
				}
			}
		}
		return sc.Err()
	})
}

// saveProfile writes the admin API's profile at url to file.
func saveProfile(url, token, file string) error {
	return adminFetch(url, token, func(body io.Reader) error {
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

// adminFetch GETs url with the admin token and hands a 200 answer's body to read.
func adminFetch(url, token string, read func(io.Reader) error) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	return read(res.Body)
}
