// Command benchtool is the load side of the proxy benchmark (bench/run.sh):
//
//	benchtool backends -addrs 127.0.0.1:9101,127.0.0.1:9102   serve 100-byte bodies (-body N: N bytes)
//	benchtool load -url URL -conns 64 -duration 10s          closed loop: req/s
//	benchtool rate -url URL -rate 2000 -duration 10s         open loop: p50/p99 latency
//	benchtool sink -addr 127.0.0.1:19200                     OTLP/HTTP trace sink (answers 200, counts)
//	benchtool idle -addr ADDR -pid PID -conns 10000          idle keep-alive connections: memory per connection
//	benchtool ports -n 1040                                  first port of a free block of consecutive ports
//	benchtool floor -addr A -backends B=5,C=3                 the least a Go proxy does per request (floor.go)
//	benchtool evfloor -addr A -backends B=5,C=3               the same on an own epoll loop (evfloor.go)
//
// It uses only the standard library so the harness builds anywhere.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtool backends|load|rate|sink|idle|idleup|ports|floor|evfloor [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "backends":
		err = backends(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "rate":
		err = rate(os.Args[2:])
	case "sink":
		err = sink(os.Args[2:])
	case "idle":
		err = idle(os.Args[2:])
	case "idleup":
		err = idleup(os.Args[2:])
	case "ports":
		err = ports(os.Args[2:])
	case "floor":
		err = floor(os.Args[2:])
	case "evfloor":
		err = evfloor(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

var body100 = []byte(strings.Repeat("x", 99) + "\n")

func backends(args []string) error {
	fs := flag.NewFlagSet("backends", flag.ExitOnError)
	addrs := fs.String("addrs", "127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103,127.0.0.1:9104", "listen addresses")
	size := fs.Int("body", len(body100), "answer body size in bytes")
	fs.Parse(args)
	if *size < 1 {
		return fmt.Errorf("backends: -body %d: want a size of at least 1 byte", *size)
	}
	body := body100
	if *size != len(body100) {
		body = []byte(strings.Repeat("x", *size-1) + "\n")
	}
	length := strconv.Itoa(len(body))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", length)
		w.Write(body)
	})
	var servers []*http.Server
	for _, a := range strings.Split(*addrs, ",") {
		l, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		s := &http.Server{Handler: h, IdleTimeout: 120 * time.Second}
		servers = append(servers, s)
		go s.Serve(l)
	}
	<-ctx.Done()
	for _, s := range servers {
		s.Close()
	}
	return nil
}

// sink accepts OTLP/HTTP exports (POST /v1/traces) and answers an empty
// ExportTraceServiceResponse, so the "full" proxy exports to a real local
// endpoint instead of stdout. It prints the number of exports on exit.
func sink(args []string) error {
	fs := flag.NewFlagSet("sink", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:19200", "listen address")
	fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var n atomic.Int64
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go s.Serve(l)
	<-ctx.Done()
	s.Close()
	fmt.Fprintf(os.Stderr, "sink: %d exports\n", n.Load())
	return nil
}

// newClient keeps up to conns connections; https URLs take any certificate
// (loopback) and speak HTTP/1.1, or HTTP/2 with h2 (streams multiplexed on
// as few connections as the server's stream limit allows).
func newClient(conns int, h2 bool) *http.Client {
	return newClientOpts(conns, h2, false)
}

// newClientOpts is newClient; newConn opens a connection per request
// (Connection: close) with a full TLS handshake each (no session cache:
// nothing is resumed), key exchange X25519 (no ML-KEM: OpenSSL 3.0, nginx 1.22
// on Debian 12, has none).
func newClientOpts(conns int, h2, newConn bool) *http.Client {
	tr := &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns,
		DisableCompression: true, IdleConnTimeout: time.Minute,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // #nosec G402: loopback benchmark
	}
	if newConn {
		tr.DisableKeepAlives = true
		tr.TLSClientConfig.CurvePreferences = []tls.CurveID{tls.X25519, tls.CurveP256} // P-256: the certificate's curve, for TLS 1.2
	}
	if h2 {
		tr.ForceAttemptHTTP2 = true
	} else {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(c *http.Client, url, host string) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if host != "" {
		req.Host = host
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil && res.StatusCode != 200 {
		err = fmt.Errorf("status %d", res.StatusCode)
	}
	return err
}

// load runs a closed loop over conns keep-alive connections and prints
// "requests=N errors=E seconds=S rps=R".
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	url := fs.String("url", "", "target URL")
	host := fs.String("host", "bench.test", "Host header")
	conns := fs.Int("conns", 64, "concurrent keep-alive connections")
	dur := fs.Duration("duration", 10*time.Second, "run time")
	h2 := fs.Bool("h2", false, "HTTP/2 (https URL): conns concurrent requests, multiplexed")
	newConn := fs.Bool("newconn", false, "a new connection per request (https: a full TLS 1.3 handshake, X25519)")
	fs.Parse(args)
	c := newClientOpts(*conns, *h2, *newConn)
	var n, errs atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := do(c, *url, *host); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	fmt.Printf("requests=%d errors=%d seconds=%.2f rps=%.0f\n", n.Load(), errs.Load(), secs, float64(n.Load())/secs)
	if e := firstErr.Load(); e != nil {
		fmt.Fprintln(os.Stderr, "first error:", e)
	}
	return nil
}

// rate sends requests at a fixed rate (open loop: latency is measured from
// the scheduled send time, so queueing shows) and prints p50/p99 in ms.
func rate(args []string) error {
	fs := flag.NewFlagSet("rate", flag.ExitOnError)
	url := fs.String("url", "", "target URL")
	host := fs.String("host", "bench.test", "Host header")
	r := fs.Int("rate", 2000, "requests per second")
	dur := fs.Duration("duration", 10*time.Second, "run time")
	conns := fs.Int("conns", 64, "connection cap")
	fs.Parse(args)
	if *r <= 0 {
		return errors.New("-rate must be positive")
	}
	c := newClient(*conns, false)
	interval := time.Second / time.Duration(*r)
	total := int(dur.Seconds() * float64(*r))
	lat := make([]time.Duration, total)
	var errs atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, *conns*4)
	start := time.Now()
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d) // pacing the open-loop schedule
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int, at time.Time) {
			defer func() { <-sem; wg.Done() }()
			if err := do(c, *url, *host); err != nil {
				errs.Add(1)
			}
			lat[i] = time.Since(at)
		}(i, at)
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	// p90, p99.9 and the maximum after p50 and p99 (whose names bench/run.sh
	// parses): where in the distribution a tail begins.
	fmt.Printf("requests=%d errors=%d p50_ms=%.3f p99_ms=%.3f p90_ms=%.3f p999_ms=%.3f max_ms=%.3f\n",
		total, errs.Load(), p(0.50), p(0.99), p(0.90), p(0.999), p(1))
	return nil
}
