//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

// answerDropper is a TCP proxy that, once armed, lets the first large
// client→server write (a publish transaction: the snapshot travels in it)
// reach the server and from then on discards everything the server answers,
// until healed: the commit happens, its answer is lost.
type answerDropper struct {
	ln        net.Listener
	target    string
	threshold int

	mu       sync.Mutex
	armed    bool
	dropping bool
	tripped  chan struct{}
	dropped  int64
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newAnswerDropper(t *testing.T, target string, threshold int) *answerDropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &answerDropper{ln: ln, target: target, threshold: threshold, tripped: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.wg.Add(1)
			go d.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); d.heal(); d.wg.Wait() })
	return d
}

func (d *answerDropper) serve(c net.Conn) {
	defer d.wg.Done()
	s, err := net.Dial("tcp", d.target)
	if err != nil {
		c.Close()
		return
	}
	d.mu.Lock()
	d.conns[c], d.conns[s] = struct{}{}, struct{}{}
	d.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { // client → server
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				d.mu.Lock()
				if d.armed && n >= d.threshold {
					d.armed, d.dropping = false, true
					close(d.tripped)
				}
				d.mu.Unlock()
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // server → client
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				d.mu.Lock()
				drop := d.dropping
				if drop {
					d.dropped += int64(n)
				}
				d.mu.Unlock()
				if !drop {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
			}
			if err != nil {
				return
			}
		}
	}()
	<-done
	resetConn(c)
	resetConn(s)
	<-done
	d.mu.Lock()
	delete(d.conns, c)
	delete(d.conns, s)
	d.mu.Unlock()
}

func (d *answerDropper) arm() {
	d.mu.Lock()
	d.armed = true
	d.mu.Unlock()
}

// heal resets every open connection (their streams lost bytes) and stops
// dropping.
func (d *answerDropper) heal() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropping, d.armed = false, false
	for c := range d.conns {
		resetConn(c)
	}
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Catalogue B5: a commit whose answer is really lost. The scheduler reaches
// etcd through answerDropper; armed, it forwards the publish transaction of
// an operator change and drops every answer after it. The version is
// committed (read from etcd while the answers are still being dropped);
// after the heal the scheduler, not knowing whether it committed, finds its
// own content and does not publish it again: no two consecutive versions
// with one content hash, exactly one version with the new row. The proxies
// serve throughout (0 failed requests) and apply it.
func TestFaultsLostCommitAnswer(t *testing.T) {
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE2", "demo-main", demoMainFull)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := newAnswerDropper(t, etcdAddr(f), 1500)
	logPath := ownScheduler(t, f, "sched-lossy", "http://"+d.ln.Addr().String()).log
	// sched-lossy leads and publishes: a working leader.
	setRow(ctx, t, f, 40)
	first := waitRow(ctx, t, f, 40, "sched-lossy")
	waitApplied(t, f, "BFE2", 30*time.Second)

	l := startLoad(proxyURLs(f, "BFE2"), 24)
	defer l.end()
	d.arm()
	setRow(ctx, t, f, 35)
	select {
	case <-d.tripped:
	case <-time.After(30 * time.Second):
		t.Fatal("no large write from the scheduler after the change: the publish never started")
	}
	// The commit reached etcd although its answer is being dropped.
	lost := waitRow(ctx, t, f, 35, "sched-lossy")
	d.mu.Lock()
	dropped := d.dropped
	d.mu.Unlock()
	healed := time.Now()
	d.heal()
	// The scheduler must come back (re-read, find its own content) and go on
	// publishing: a later change is published once, by it.
	setRow(ctx, t, f, 45)
	last := waitRow(ctx, t, f, 45, "sched-lossy")
	waitApplied(t, f, "BFE2", 30*time.Second)
	recovered := time.Since(healed)
	failed, sent, _, failures := l.end()

	var hashes []string
	with35 := 0
	for v := first; v <= last; v++ {
		s, err := f.Snapshot(ctx, "BFE2", v)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if len(hashes) > 0 && hashes[len(hashes)-1] == s.Meta.Hash {
			t.Errorf("B5: v%d has the content of v%d (%s): published twice", v, v-1, s.Meta.Hash[:12])
		}
		hashes = append(hashes, s.Meta.Hash)
		if s.Clusters["demo-main"].Row.Weights["SC1"] == 35 {
			with35++
		}
	}
	logb, _ := os.ReadFile(logPath)
	// The scheduler logs "published" without a note only on a commit answer
	// it received: for the lost one it must have found its content by
	// reading (then its "published" line says the answer was lost).
	answered := false
	for _, line := range strings.Split(string(logb), "\n") {
		if strings.Contains(line, `"msg":"published"`) && strings.Contains(line, `"proxy_cluster":"BFE2"`) &&
			strings.Contains(line, fmt.Sprintf(`"version":%d,`, lost)) && !strings.Contains(line, `"note":"the commit's answer was lost`) {
			answered = true
		}
	}
	if answered {
		t.Errorf("B5: the scheduler received the answer to v%d's commit: the fault did not happen", lost)
	}
	t.Logf("B5 the answer to v%d's commit dropped (%d bytes of answers dropped); after the heal v%d published and applied in %.1f s; %d version(s) with SC1=35 among v%d..v%d; %d of %d requests failed",
		lost, dropped, last, recovered.Seconds(), with35, first, last, failed, sent)
	if with35 != 1 {
		t.Errorf("B5: %d versions carry the change whose commit answer was lost, want exactly 1\n%s", with35, tail(logb, 3000))
	}
	if failed != 0 {
		t.Errorf("B5: %d of %d requests failed: %v", failed, sent, failures)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
