// Package fleet starts the local Sluice fleet from the real binaries: an
// embedded etcd, schedulers, proxy clusters BFE1 (IDC1) and BFE2 (IDC2) with
// two proxies each, and demo backends each with its lbagent. `make run` and
// the end-to-end suite both use it, so what a newcomer sees is what CI tests.
package fleet

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// DemoState is the desired state of the local fleet (YAML).
//
//go:embed demo.yaml
var DemoState []byte

// Options configure Start.
type Options struct {
	// BinDir holds lbproxy, lbscheduler, lbagent, lbctl and demo-backend.
	BinDir string
	// WorkDir holds logs, disk caches and etcd's data. Created if missing.
	WorkDir string
	// BasePort > 0 gives fixed ports (make run); 0 picks free ports (tests).
	BasePort int
	// Schedulers is how many lbscheduler processes to run (default 1).
	Schedulers int
	// BackendsPerSubCluster for demo-main (default 3).
	BackendsPerSubCluster int
	// Env is added to every child's environment (e.g. OTEL_* variables).
	Env []string
	// ProxyEnv is added to proxies only.
	ProxyEnv []string
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// State overrides DemoState.
	State []byte
}

// Proxy is one lbproxy process.
type Proxy struct {
	*Proc
	ProxyCluster string
	ID           string
	URL          string // http://127.0.0.1:port
	AdminURL     string
	CacheDir     string
	args         []string
}

// Backend is one demo backend and its agent.
type Backend struct {
	Proc       *Proc
	Agent      *Proc
	Cluster    string
	SubCluster string
	IDC        string
	Addr       string // 127.0.0.1:port
	AgentAdmin string
}

// Fleet is a running local fleet.
type Fleet struct {
	opts       Options
	Etcd       *etcdtest.Server
	Endpoints  string
	Client     *clientv3.Client
	Layout     keys.Layout
	Proxies    []*Proxy
	Backends   []*Backend
	Schedulers []*Proc
	SchedAPIs  []string
	LogDir     string

	mu        sync.Mutex
	nextPort  int
	stopped   bool
	restarted map[string]int
}

// Start brings the whole fleet up and waits until every proxy serves the
// scheduler's first snapshot. On error everything started is stopped.
func Start(ctx context.Context, o Options) (f *Fleet, err error) {
	if o.Schedulers == 0 {
		o.Schedulers = 1
	}
	if o.BackendsPerSubCluster == 0 {
		o.BackendsPerSubCluster = 3
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.State == nil {
		o.State = DemoState
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return nil, err
	}
	fl := &Fleet{opts: o, Layout: keys.MustNew(""), LogDir: filepath.Join(o.WorkDir, "logs"), nextPort: o.BasePort, restarted: map[string]int{}}
	if err := os.MkdirAll(fl.LogDir, 0o755); err != nil {
		return nil, err
	}
	// On error, stop what was started (the named result is nil by then).
	defer func() {
		if err != nil {
			fl.Stop()
		}
	}()
	f = fl

	var state config.State
	if err := codec.Unmarshal(o.State, &state); err != nil {
		return nil, fmt.Errorf("fleet state: %w", err)
	}

	// etcd, embedded in this process.
	etcdDir := filepath.Join(o.WorkDir, "etcd")
	_ = os.RemoveAll(etcdDir)
	cp, pp := f.port(), f.port()
	f.progress("starting embedded etcd on 127.0.0.1:%d", cp)
	srv, err := etcdtest.Start(etcdtest.Options{Dir: etcdDir, ClientPort: cp, PeerPort: pp})
	if err != nil {
		return nil, err
	}
	f.Etcd = srv
	f.Endpoints = strings.Join(srv.Endpoints, ",")
	if f.Client, err = srv.Client(); err != nil {
		return nil, err
	}
	stateJSON, err := json.Marshal(&state)
	if err != nil {
		return nil, err
	}
	if _, err := f.Client.Put(ctx, f.Layout.Desired(), string(stateJSON)); err != nil {
		return nil, fmt.Errorf("write desired state: %w", err)
	}

	// Backends and their agents.
	for _, cname := range sortedKeys(state.Clusters) {
		cl := state.Clusters[cname]
		for _, sname := range sortedKeys(cl.SubClusters) {
			n := 1
			if cname == "demo-main" {
				n = o.BackendsPerSubCluster
			}
			for i := 0; i < n; i++ {
				if err := f.startBackend(ctx, cname, sname, cl.SubClusters[sname].IDC, i+1); err != nil {
					return nil, err
				}
			}
		}
	}

	// Schedulers.
	for i := 1; i <= o.Schedulers; i++ {
		if err := f.startScheduler(i); err != nil {
			return nil, err
		}
	}

	// Proxies: two per proxy cluster.
	for _, pc := range sortedKeys(state.Topology.ProxyClusters) {
		for i := 1; i <= 2; i++ {
			if _, err := f.StartProxy(pc, fmt.Sprintf("%s-p%d", strings.ToLower(pc), i)); err != nil {
				return nil, err
			}
		}
	}
	f.progress("waiting for every proxy to apply the first snapshot")
	for _, p := range f.Proxies {
		if err := WaitHTTP(ctx, p.AdminURL+"/readyz", 60*time.Second); err != nil {
			return nil, fmt.Errorf("proxy %s not ready (log: %s): %w", p.ID, p.Log, err)
		}
	}
	f.progress("waiting for every backend to be registered and published")
	if err := f.waitServing(ctx, 60*time.Second); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Fleet) progress(format string, args ...any) {
	fmt.Fprintf(f.opts.Progress, "  · "+format+"\n", args...)
}

// port returns the next fixed port, or a free one (freePort).
func (f *Fleet) port() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.opts.BasePort > 0 {
		p := f.nextPort
		f.nextPort++
		return p
	}
	return freePort()
}

func (f *Fleet) bin(name string) string { return filepath.Join(f.opts.BinDir, name) }

func (f *Fleet) startBackend(ctx context.Context, cluster, sub, idc string, n int) error {
	addr := fmt.Sprintf("127.0.0.1:%d", f.port())
	name := fmt.Sprintf("backend-%s-%s-%d", cluster, sub, n)
	p, err := startProc(name, f.bin("demo-backend"), []string{"--listen", addr, "--cluster", cluster, "--subcluster", sub}, f.LogDir, f.opts.Env)
	if err != nil {
		return err
	}
	b := &Backend{Proc: p, Cluster: cluster, SubCluster: sub, IDC: idc, Addr: addr}
	f.Backends = append(f.Backends, b)
	if err := WaitHTTP(ctx, "http://"+addr+"/healthz", 20*time.Second); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.StartAgent(b)
}

// RestartBackend starts b's demo backend again, on the same address, after
// it was stopped or killed; its agent is left as it is.
func (f *Fleet) RestartBackend(ctx context.Context, b *Backend) error {
	p, err := startProc(b.Proc.Name, f.bin("demo-backend"), b.Proc.Args, f.LogDir, f.opts.Env)
	if err != nil {
		return err
	}
	b.Proc = p
	return WaitHTTP(ctx, "http://"+b.Addr+"/healthz", 20*time.Second)
}

// StartAgent (re)starts the lbagent of b.
func (f *Fleet) StartAgent(b *Backend) error {
	admin := fmt.Sprintf("127.0.0.1:%d", f.port())
	name := fmt.Sprintf("agent-%s-%s-%s", b.Cluster, b.SubCluster, strings.ReplaceAll(b.Addr, ":", "_"))
	a, err := startProc(name, f.bin("lbagent"), []string{
		"--etcd", f.Endpoints, "--cluster", b.Cluster, "--subcluster", b.SubCluster, "--idc", b.IDC,
		"--addr", b.Addr, "--weight", "10", "--probe-path", "/healthz", "--probe-interval", "500ms", "--probe-timeout", "300ms",
		"--rise", "1", "--fall", "2", "--metrics-url", "http://" + b.Addr + "/metrics",
		"--report-interval", "2s", "--lease-ttl", "3s", "--drain-timeout", "3s", "--drain-min", "1s", "--admin", admin,
	}, f.LogDir, f.opts.Env)
	if err != nil {
		return err
	}
	b.Agent, b.AgentAdmin = a, "http://"+admin
	return nil
}

func (f *Fleet) startScheduler(i int) error {
	api := fmt.Sprintf("127.0.0.1:%d", f.port())
	p, err := startProc(fmt.Sprintf("scheduler-%d", i), f.bin("lbscheduler"), []string{
		"--id", fmt.Sprintf("sched-%d", i), "--etcd", f.Endpoints, "--api", api, "--session-ttl", "3s",
	}, f.LogDir, f.opts.Env)
	if err != nil {
		return err
	}
	f.Schedulers = append(f.Schedulers, p)
	f.SchedAPIs = append(f.SchedAPIs, "http://"+api)
	return nil
}

// RestartScheduler starts scheduler i (1-based) again after it was stopped.
func (f *Fleet) RestartScheduler(i int) error {
	api := strings.TrimPrefix(f.SchedAPIs[i-1], "http://")
	p, err := startProc(fmt.Sprintf("scheduler-%d", i), f.bin("lbscheduler"), []string{
		"--id", fmt.Sprintf("sched-%d", i), "--etcd", f.Endpoints, "--api", api, "--session-ttl", "3s",
	}, f.LogDir, f.opts.Env)
	if err != nil {
		return err
	}
	f.Schedulers[i-1] = p
	return nil
}

// StartProxy starts one lbproxy of proxy cluster pc with the given id.
func (f *Fleet) StartProxy(pc, id string) (*Proxy, error) {
	listen := fmt.Sprintf("127.0.0.1:%d", f.port())
	admin := fmt.Sprintf("127.0.0.1:%d", f.port())
	cache := filepath.Join(f.opts.WorkDir, "cache", id)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--proxy-cluster", pc, "--id", id, "--etcd", f.Endpoints,
		"--listen", listen, "--admin", admin, "--cache-dir", cache,
		"--access-log", filepath.Join(f.LogDir, id+".access.log"),
	}
	p, err := startProc(id, f.bin("lbproxy"), args, f.LogDir, append(append([]string{}, f.opts.Env...), f.opts.ProxyEnv...))
	if err != nil {
		return nil, err
	}
	px := &Proxy{Proc: p, ProxyCluster: pc, ID: id, URL: "http://" + listen, AdminURL: "http://" + admin, CacheDir: cache, args: args}
	f.Proxies = append(f.Proxies, px)
	return px, nil
}

// RestartProxy starts a stopped proxy again with the same flags.
func (f *Fleet) RestartProxy(px *Proxy) error {
	p, err := startProc(px.ID, f.bin("lbproxy"), px.args, f.LogDir, append(append([]string{}, f.opts.Env...), f.opts.ProxyEnv...))
	if err != nil {
		return err
	}
	px.Proc = p
	return nil
}

// ProxiesOf returns the proxies of one proxy cluster.
func (f *Fleet) ProxiesOf(pc string) []*Proxy {
	var out []*Proxy
	for _, p := range f.Proxies {
		if p.ProxyCluster == pc {
			out = append(out, p)
		}
	}
	return out
}

// BackendsOf returns the backends of one cluster (and sub-cluster, if not "").
func (f *Fleet) BackendsOf(cluster, sub string) []*Backend {
	var out []*Backend
	for _, b := range f.Backends {
		if b.Cluster == cluster && (sub == "" || b.SubCluster == sub) {
			out = append(out, b)
		}
	}
	return out
}

// Lbctl runs bin/lbctl against the fleet's etcd and returns its combined
// output and exit code.
func (f *Fleet) Lbctl(ctx context.Context, args ...string) (string, int, error) {
	cmd := exec.CommandContext(ctx, f.bin("lbctl"), append([]string{"--endpoints", f.Endpoints}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), 0, nil
}

// Current returns the live snapshot pointer of a proxy cluster.
func (f *Fleet) Current(ctx context.Context, pc string) (snapshot.Pointer, error) {
	k, err := f.Layout.Current(pc)
	if err != nil {
		return snapshot.Pointer{}, err
	}
	r, err := f.Client.Get(ctx, k)
	if err != nil {
		return snapshot.Pointer{}, err
	}
	if len(r.Kvs) == 0 {
		return snapshot.Pointer{}, fmt.Errorf("no snapshot published for %s", pc)
	}
	var p snapshot.Pointer
	err = codec.DecodeValue(string(r.Kvs[0].Key), r.Kvs[0].Value, &p)
	return p, err
}

// Stop stops everything: proxies, schedulers, agents (leases revoked by
// their own SIGTERM handling), backends, then etcd. It returns the processes
// that did not stop cleanly.
func (f *Fleet) Stop() []error {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	f.mu.Unlock()
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	stopAll := func(ps []*Proc, grace time.Duration) {
		for _, p := range ps {
			if p == nil {
				continue
			}
			wg.Add(1)
			go func(p *Proc) {
				defer wg.Done()
				if err := p.Stop(grace); err != nil {
					emu.Lock()
					errs = append(errs, err)
					emu.Unlock()
				}
			}(p)
		}
		wg.Wait()
	}
	var ps []*Proc
	for _, p := range f.Proxies {
		ps = append(ps, p.Proc)
	}
	stopAll(ps, 20*time.Second)
	stopAll(f.Schedulers, 15*time.Second)
	ps = ps[:0]
	for _, b := range f.Backends {
		ps = append(ps, b.Agent)
	}
	stopAll(ps, 15*time.Second)
	ps = ps[:0]
	for _, b := range f.Backends {
		ps = append(ps, b.Proc)
	}
	stopAll(ps, 10*time.Second)
	if f.Client != nil {
		f.Client.Close()
	}
	if f.Etcd != nil {
		f.Etcd.Stop()
	}
	return errs
}

// WaitHTTP polls url until it answers 200 or the timeout passes.
func WaitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: 2 * time.Second}
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("%s answered %d", url, resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("waited %s: %w", timeout, last)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
