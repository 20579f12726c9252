package configwatch

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// BenchmarkFanoutScale is the scale run of issue 20: SLUICE_FANOUT_PROXIES
// (default 1000) in-process watchers — the real configwatch, decode and
// validate.Check included, with a no-op Apply and no server — follow one
// external etcd process (Debian's /usr/bin/etcd, so that its CPU time can be
// read from /proc/<pid>/stat), 50 watchers per client connection. Each
// layout (SLUICE_FANOUT_LAYOUTS, default whole,split,push: see
// fanoutPublisher) gets SLUICE_FANOUT_PUBLISHES (default 5) one-cluster
// changes at 200 backend clusters × 10 instances, one at a time; it reports
// publish → applied on all proxies (p50 and max over the publishes),
// publish → applied per proxy (p50, p99 over every proxy's apply) and etcd
// CPU ms per publish (user + system, from the pointer write until the last
// proxy applied) and, to judge it, etcd's idle CPU ms per second over 20 s
// before the first publish (CPU time comes in 10 ms ticks), and the net figure: CPU per publish less the
// idle rate times the publish's window (the window is long when the
// simulator is starved; etcd's own CPU is its process's, apart from the
// simulator's, which is reported as sim-cpu-ms/publish: this process's
// user + system). The -fine figures count etcd's CPU from its threads'
// schedstat (nanoseconds) instead of 10 ms ticks. reads/proxy/publish is the etcd requests the watchers'
// fetches made (Status.SnapshotReads). Every wait is bounded (10 min).
// Run: go test -run '^$' -bench FanoutScale -benchtime 1x -timeout 30m ./internal/configwatch/
func BenchmarkFanoutScale(b *testing.B) {
	proxies, publishes := envInt(b, "SLUICE_FANOUT_PROXIES", 1000), envInt(b, "SLUICE_FANOUT_PUBLISHES", 5)
	e, err := etcdtest.StartExternal(etcdtest.DebianEtcd, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	for _, layout := range strings.Split(envStr("SLUICE_FANOUT_LAYOUTS", "whole,split,push"), ",") {
		if layout != "whole" && layout != "split" && layout != "push" {
			b.Fatalf("SLUICE_FANOUT_LAYOUTS: layout %q is not whole, split or push", layout)
		}
		b.Run("layout="+layout, func(b *testing.B) {
			for range b.N {
				scaleRun(b, e, layout, proxies, publishes)
			}
		})
	}
}

func envStr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// etcdCPU is the process's user + system CPU time.
func etcdCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command (which may hold spaces) start after ") ".
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // CLK_TCK 100
}

// etcdCPUFine is the process's CPU time in nanoseconds: the sum of its
// threads' /proc/<pid>/task/*/schedstat run time (exact, where stat counts
// 10 ms ticks; a thread that exited is not counted, which Go's threads
// rarely do).
func etcdCPUFine(b *testing.B, pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Fatal(err)
	}
	var sum time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		sum += time.Duration(ns)
	}
	return sum
}

// selfCPU is this process's user + system CPU time.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func scaleRun(b *testing.B, e *etcdtest.External, layout string, proxies, publishes int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lay := keys.MustNew(fmt.Sprintf("/fanout-%s-%d", layout, time.Now().UnixNano()))
	cli := newClient(b, e.Endpoints...)
	weights := map[int]int{}
	f := &fanoutPublisher{cli: cli, lay: lay, layout: layout}
	pub := func(v uint64) time.Time {
		_, t0 := f.publish(b, fanoutSnapshot(v, 200, 5, weights))
		return t0
	}

	var (
		mu      sync.Mutex
		applied = map[uint64]int{}
		at      = map[uint64][]time.Time{}
		allDone = make(chan uint64, 16)
	)
	apply := func(c validate.Checked) error {
		v := c.Snapshot().Meta.Version
		now := time.Now()
		mu.Lock()
		applied[v]++
		at[v] = append(at[v], now)
		n := applied[v]
		mu.Unlock()
		if n == proxies {
			allDone <- v
		}
		return nil
	}
	waitAll := func(v uint64) {
		timeout := time.After(10 * time.Minute)
		for {
			select {
			case got := <-allDone:
				if got == v {
					return
				}
			case <-timeout:
				mu.Lock()
				n := applied[v]
				mu.Unlock()
				b.Fatalf("v%d applied by %d of %d proxies within 10 min", v, n, proxies)
			}
		}
	}
	pub(1)
	var clients []*clientv3.Client
	var ws []*Watcher
	var done sync.WaitGroup
	var failed atomic.Int64
	for i := range proxies {
		if i%50 == 0 {
			clients = append(clients, newClient(b, e.Endpoints...))
		}
		w, err := New(Config{Client: clients[len(clients)-1], Layout: lay, ProxyCluster: pc, ID: fmt.Sprintf("p%04d", i),
			Apply: apply, Logger: discard(), StoreCheckInterval: time.Hour, StallTimeout: 30 * time.Minute, OpTimeout: 10 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		ws = append(ws, w)
		done.Add(1)
		go func() {
			defer done.Done()
			if err := w.Run(ctx); err != nil {
				failed.Add(1)
			}
		}()
		if n := i + 1; n%50 == 0 || n == proxies {
			// Start in batches: a thousand first decodes at once starve
			// the process (it is the first sync, not what is measured).
			poll.EventuallyTrue(b, 10*time.Minute, "a batch of watchers applied v1", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return applied[1] >= n
			})
		}
	}
	defer done.Wait()
	defer cancel()
	waitAll(1)
	idle0, idleF0, idleT := etcdCPU(b, e.Pid()), etcdCPUFine(b, e.Pid()), time.Now()
	<-time.After(20 * time.Second) // a measurement window, not a wait for state
	idle := float64((etcdCPU(b, e.Pid()) - idle0).Microseconds()) / 1000 / time.Since(idleT).Seconds()
	idleF := float64((etcdCPUFine(b, e.Pid()) - idleF0).Microseconds()) / 1000 / time.Since(idleT).Seconds()
	reads := func() (n uint64) {
		for _, w := range ws {
			n += w.Status().SnapshotReads
		}
		return n
	}
	reads0 := reads()
	var all, each []time.Duration
	var cpu, cpuF, sim, window time.Duration
	for i := range publishes {
		v := uint64(i + 2)
		weights[i] = 3000 + i
		c0, f0, s0, w0 := etcdCPU(b, e.Pid()), etcdCPUFine(b, e.Pid()), selfCPU(b), time.Now()
		t0 := pub(v)
		waitAll(v)
		cpu += etcdCPU(b, e.Pid()) - c0
		cpuF += etcdCPUFine(b, e.Pid()) - f0
		sim += selfCPU(b) - s0
		window += time.Since(w0)
		mu.Lock()
		var last time.Duration
		for _, t := range at[v] {
			each = append(each, t.Sub(t0))
			last = max(last, t.Sub(t0))
		}
		all = append(all, last)
		mu.Unlock()
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d watchers' Run failed", n)
	}
	slices.Sort(all)
	slices.Sort(each)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(all, 0.5), "all-p50-ms")
	b.ReportMetric(q(all, 1), "all-max-ms")
	b.ReportMetric(q(each, 0.5), "proxy-p50-ms")
	b.ReportMetric(q(each, 0.99), "proxy-p99-ms")
	perPub := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(publishes) }
	b.ReportMetric(perPub(cpu), "etcd-cpu-ms/publish")
	b.ReportMetric(idle, "etcd-idle-ms/s")
	b.ReportMetric(perPub(cpu)-idle*window.Seconds()/float64(publishes), "etcd-net-cpu-ms/publish")
	b.ReportMetric(perPub(cpuF)-idleF*window.Seconds()/float64(publishes), "etcd-net-cpu-fine-ms/publish")
	b.ReportMetric(idleF, "etcd-idle-fine-ms/s")
	b.ReportMetric(perPub(sim), "sim-cpu-ms/publish")
	b.ReportMetric(float64(reads()-reads0)/float64(publishes*proxies), "reads/proxy/publish")
}
