package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// idleup measures what the proxy (-pid) holds per idle upstream (pool)
// connection (flags as idle's; -settle 22s, as the fasthttp front keeps the
// burst's worker goroutines for 10 to 20 s): it serves the backend itself on
// -backend, where each request waits until -conns of them are there, so the
// proxy opens -conns upstream connections at once; after the answers, the
// client connections are closed and the upstream ones stay idle in the
// proxy's pool (the snapshot must keep that many:
// pool.max_idle_conns_per_host). It prints RSS, heap and stack per idle
// upstream connection as idle does.
//
//	benchtool idleup -addr 127.0.0.1:28383 -backend 127.0.0.1:29302 -pid 1234 -conns 5000 [-admin A -token T]
func idleup(args []string) error {
	fs := flag.NewFlagSet("idleup", flag.ExitOnError)
	addr := fs.String("addr", "", "proxy address (plain HTTP/1.1)")
	backend := fs.String("backend", "127.0.0.1:29302", "listen address of the backend the proxy forwards to")
	conns := fs.Int("conns", 5000, "upstream connections")
	mf := memoryFlags(fs, 22*time.Second) // fasthttp ends a worker goroutine idle for 10 s within 20 s
	fs.Parse(args)
	if *addr == "" || mf.pid == 0 {
		return fmt.Errorf("idleup: -addr and -pid are required")
	}
	host, pid, admin, token, label := &mf.host, &mf.pid, &mf.admin, &mf.token, &mf.label
	n := *conns
	var open atomic.Int64 // the backend's open connections (the proxy's upstream ones)
	var arrived atomic.Int64
	all := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/warm" {
				if arrived.Add(1) >= int64(n) {
					once.Do(func() { close(all) })
				}
				<-all
			}
			w.Header().Set("Content-Length", "100")
			w.Write(body100)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		},
		IdleTimeout: 10 * time.Minute,
	}
	l, err := net.Listen("tcp", *backend)
	if err != nil {
		return err
	}
	go srv.Serve(l)
	defer srv.Close()
	// One request first, not held, retried until the proxy is up (it may
	// still be starting): its upstream machinery warm before the baseline.
	for deadline := time.Now().Add(10 * time.Second); ; {
		err := oneClientGET(*addr, *host, "/warm", 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm-up request: %w", err)
		}
		time.Sleep(100 * time.Millisecond) // polling for the proxy to come up
	}
	base := open.Load()
	before, err := measure(*pid, *admin, *token)
	if err != nil {
		return err
	}
	start := time.Now()
	go func() { // all answered once n requests are there, or once none came for 2 s (some failed on the way)
		for last := int64(-1); ; {
			select {
			case <-all:
				return
			case <-time.After(2 * time.Second):
			}
			if a := arrived.Load(); a == last {
				once.Do(func() { close(all) })
				return
			} else {
				last = a
			}
		}
	}()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs <- oneClientGET(*addr, *host, "/", i) }(i)
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed == 0 {
				fmt.Printf("%s: first failure: %v\n", *label, err)
			}
			failed++
		}
	}
	opened := time.Since(start)
	time.Sleep(mf.settle) // let the proxy settle (a benchmark, not a test)
	after, err := measure(*pid, *admin, *token)
	if err != nil {
		return err
	}
	up := float64(open.Load() - base) // idle upstream connections kept by the proxy
	if up <= 0 {
		return fmt.Errorf("%s: the proxy kept no upstream connection (%d requests failed)", *label, failed)
	}
	settled, err := mf.settled(before, up)
	if err != nil {
		return err
	}
	fmt.Printf("%-18s upstream_conns=%.0f failed=%d open_s=%.1f rss_kib/conn=%s heap_alloc_kib/conn=%s heap_inuse_kib/conn=%s stack_kib/conn=%s goroutines=%s%s\n",
		*label, up, failed, opened.Seconds(), perConn(before, after, "rss", up), perConn(before, after, "go_memstats_heap_alloc_bytes", up),
		perConn(before, after, "go_memstats_heap_inuse_bytes", up), perConn(before, after, "go_memstats_stack_inuse_bytes", up),
		fmtCount(after["go_goroutines"]), settled)
	return nil
}

// oneClientGET sends one GET on its own client connection and closes it.
func oneClientGET(addr, host, path string, i int) error {
	d := net.Dialer{Timeout: 5 * time.Second,
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, byte(i/20000), byte(2+i%200))}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return oneGET(c, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
}
