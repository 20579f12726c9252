// Command demo-backend is the backend of the local fleet and the end-to-end
// suite: an HTTP server that says who it is, counts what it received, and
// exposes the load signals lbagent reads.
//
//	demo-backend --listen 127.0.0.1:18001 --cluster demo-main --subcluster SC1
//
// Every response is JSON {"cluster","subcluster","instance","method","path"}
// with the same facts in X-Sluice-Backend-* headers. /healthz answers 200
// (or 503 after POST /admin/unhealthy), /metrics answers
// {"in_flight":N,"requests_total":N}, /stats the per-path counts and the last
// traceparent seen. ?delay=500ms delays the answer. Fault injection for
// rollout drills (fault.go): --fail-percent P [--fail-status S] [--slow D]
// at start, or POST /admin/fault?percent=P&status=S&delay=D at run time
// (percent=0 clears); /healthz is never affected.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type backend struct {
	cluster, subcluster, instance string
	inFlight, total               atomic.Int64
	healthy                       atomic.Bool
	mu                            sync.Mutex
	lastTraceparent               string
	byPath                        map[string]int64
	fault                         fault
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	cluster := flag.String("cluster", "demo", "cluster name to report")
	sub := flag.String("subcluster", "SC", "sub-cluster name to report")
	failPercent := flag.Int("fail-percent", 0, "answer this percent of requests with --fail-status (and/or --slow)")
	failStatus := flag.Int("fail-status", 500, "status of the failed answers")
	slow := flag.Duration("slow", 0, "delay the failed answers by this long (with --fail-percent)")
	flag.Parse()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-backend:", err)
		os.Exit(1)
	}
	b := &backend{cluster: *cluster, subcluster: *sub, instance: ln.Addr().String(), byPath: map[string]int64{}}
	b.healthy.Store(true)
	status := *failStatus
	if *slow > 0 && *failPercent > 0 && !flagSet("fail-status") {
		status = 0 // slow only
	}
	if err := b.fault.set(*failPercent, status, *slow); err != nil {
		fmt.Fprintln(os.Stderr, "demo-backend: --fail-percent:", err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	slog.Info("demo-backend serving", "addr", b.instance, "cluster", b.cluster, "subcluster", b.subcluster)
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "demo-backend:", err)
		os.Exit(1)
	}
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		if !b.healthy.Load() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		return
	case "/metrics":
		writeJSON(w, map[string]int64{"in_flight": b.inFlight.Load(), "requests_total": b.total.Load()})
		return
	case "/stats":
		b.mu.Lock()
		defer b.mu.Unlock()
		writeJSON(w, map[string]any{"instance": b.instance, "requests_total": b.total.Load(), "by_path": b.byPath, "last_traceparent": b.lastTraceparent})
		return
	case "/admin/unhealthy":
		b.healthy.Store(false)
		return
	case "/admin/healthy":
		b.healthy.Store(true)
		return
	case "/admin/fault":
		b.fault.admin(w, r)
		return
	}
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	b.total.Add(1)
	b.mu.Lock()
	b.byPath[r.URL.Path]++
	if tp := r.Header.Get("Traceparent"); tp != "" {
		b.lastTraceparent = tp
	}
	b.mu.Unlock()
	if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil && d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	h := w.Header()
	if hit, status, delay := b.fault.pick(); hit {
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		if status != 0 {
			h.Set("X-Sluice-Backend-Fault", "injected")
			http.Error(w, "injected fault", status)
			return
		}
	}
	h.Set("X-Sluice-Backend-Cluster", b.cluster)
	h.Set("X-Sluice-Backend-Subcluster", b.subcluster)
	h.Set("X-Sluice-Backend-Instance", b.instance)
	writeJSON(w, map[string]string{"cluster": b.cluster, "subcluster": b.subcluster, "instance": b.instance, "method": r.Method, "path": r.URL.Path})
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
