package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func backend(t *testing.T, status int) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"lbagent"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestCheckExitCodes(t *testing.T) {
	up, down := backend(t, 200), backend(t, 503)
	cfgFile := filepath.Join(t.TempDir(), "agent.yaml")
	os.WriteFile(cfgFile, []byte("addr: "+down+"\nprobe-status: \"503\"\nprobe-body: ok\n"), 0o644)
	badFile := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(badFile, []byte("addr: "+up+"\nprobe-statuz: 200\n"), 0o644)
	cases := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"check", "--addr", up}, 0, ""},
		{[]string{"check", "--addr", up, "--probe-body", "nope"}, 1, `unhealthy: body mismatch: body does not contain "nope"`},
		{[]string{"check", "--addr", down}, 1, "unhealthy: unexpected status: status 503 not in 2xx"},
		{[]string{"check", "--addr", down, "--probe-status", "2xx|503"}, 0, ""},
		{[]string{"check", "--config", cfgFile}, 0, ""},                                               // file values apply
		{[]string{"check", "--config", cfgFile, "--probe-status", "200"}, 1, "status 503 not in 200"}, // flag beats file
		{[]string{"check", "--config", badFile}, 2, "probe-statuz: unknown field"},
		{[]string{"check", "--addr", "nonsense"}, 2, `addr: "nonsense" is not ip:port`},
		{[]string{"check", "--addr", up, "--probe-scheme", "udp"}, 2, `probe.scheme: "udp"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if code != c.code || !strings.Contains(stderr, c.inStderr) {
			t.Errorf("%v: exit %d stderr %q; want exit %d with %q", c.args, code, stderr, c.code, c.inStderr)
		}
	}
	t.Setenv("SLUICE_ADDR", down)
	if code, _, stderr := runCLI("check"); code != 1 || !strings.Contains(stderr, "503") {
		t.Errorf("SLUICE_ADDR: exit %d %q", code, stderr)
	}
}

func TestVersionAndBadConfig(t *testing.T) {
	if code, out, _ := runCLI("version"); code != 0 || !strings.HasPrefix(out, "lbagent ") {
		t.Fatalf("version: %d %q", code, out)
	}
	if code, out, _ := runCLI("--version"); code != 0 || !strings.HasPrefix(out, "lbagent version ") {
		t.Fatalf("--version: %d %q", code, out)
	}
	code, _, stderr := runCLI("--etcd", "http://127.0.0.1:1", "--cluster", "demo", "--subcluster", "SC1", "--addr", "127.0.0.1:80", "--label", "novalue")
	if code != 2 || !strings.Contains(stderr, `label: "novalue" is not k=v`) {
		t.Fatalf("bad label: %d %q", code, stderr)
	}
	code, _, stderr = runCLI("--etcd", "http://127.0.0.1:1", "--cluster", "bad/name", "--subcluster", "SC1", "--addr", "127.0.0.1:80", "--admin", "")
	if code != 2 || !strings.Contains(stderr, "cluster: name") {
		t.Fatalf("bad cluster: %d %q", code, stderr)
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lbagent")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func instance(t *testing.T, cli *clientv3.Client, key string) (report.Instance, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, key)
	if err != nil || len(r.Kvs) == 0 {
		return report.Instance{}, false
	}
	var rec report.Instance
	json.Unmarshal(r.Kvs[0].Value, &rec)
	return rec, true
}

// TestBinarySignals runs the built binary: check exit codes, the first
// SIGTERM drains and exits 0 with the key gone, a second SIGTERM during a
// drain exits 1 at once.
func TestBinarySignals(t *testing.T) {
	bin := buildBinary(t)
	srv, cli := etcdtest.New(t)
	up, down := backend(t, 200), backend(t, 503)

	if err := exec.Command(bin, "check", "--addr", up).Run(); err != nil {
		t.Fatalf("check healthy: %v", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "check", "--addr", down)
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "status 503 not in 2xx") {
		t.Fatalf("check unhealthy: %v %q", err, stderr.String())
	}

	start := func(drainMin string) (*exec.Cmd, *bytes.Buffer) {
		var logs bytes.Buffer
		c := exec.Command(bin, "--etcd", strings.Join(srv.Endpoints, ","), "--cluster", "demo-main", "--subcluster", "SC1",
			"--addr", up, "--probe-interval", "100ms", "--probe-timeout", "100ms", "--lease-ttl", "3s",
			"--drain-min", drainMin, "--drain-timeout", "60s", "--admin", "127.0.0.1:0", "--label", "zone=a")
		c.Stderr = &logs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c, &logs
	}
	key := "/sluice/instances/demo-main/SC1/" + up
	wait := func(c *exec.Cmd) (int, error) {
		ch := make(chan error, 1)
		go func() { ch <- c.Wait() }()
		select {
		case err := <-ch:
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), nil
			}
			return 0, err
		case <-time.After(30 * time.Second):
			c.Process.Kill()
			<-ch
			return -1, fmt.Errorf("lbagent did not exit")
		}
	}

	// One SIGTERM: drain, revoke, exit 0.
	c, logs := start("200ms")
	poll.EventuallyTrue(t, 15*time.Second, "registered", func() bool {
		rec, ok := instance(t, cli, key)
		return ok && rec.State == "healthy" && rec.Labels["zone"] == "a"
	})
	c.Process.Signal(syscall.SIGTERM)
	code, err := wait(c)
	if err != nil || code != 0 {
		t.Fatalf("after SIGTERM: exit %d %v\n%s", code, err, logs)
	}
	if _, ok := instance(t, cli, key); ok {
		t.Fatal("key left after the drain")
	}
	if !strings.Contains(logs.String(), `"msg":"draining"`) {
		t.Fatalf("no draining log line:\n%s", logs)
	}

	// Two SIGTERMs: the second interrupts a long drain, exit 1.
	c, logs = start("50s")
	poll.EventuallyTrue(t, 15*time.Second, "registered", func() bool { _, ok := instance(t, cli, key); return ok })
	c.Process.Signal(syscall.SIGTERM)
	poll.EventuallyTrue(t, 10*time.Second, "draining", func() bool { rec, _ := instance(t, cli, key); return rec.State == "draining" })
	c.Process.Signal(syscall.SIGTERM)
	code, err = wait(c)
	if err != nil || code != 1 {
		t.Fatalf("after second SIGTERM: exit %d %v\n%s", code, err, logs)
	}
}

// The etcd flags are api/etcdclient's: --help shows the canonical names,
// and SLUICE_ETCD_ENDPOINTS sets the endpoints (a bad one is named).
func TestEtcdFlagsHelpAndEnv(t *testing.T) {
	code, out, _ := runCLI("--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, s := range []string{"--etcd-endpoints value, --etcd value", "$SLUICE_ETCD_ENDPOINTS", "--etcd-dial-timeout", "--etcd-cacert", "--etcd-user"} {
		if !strings.Contains(out, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	t.Setenv("SLUICE_ETCD_ENDPOINTS", "ftp://h:1")
	code, _, stderr := runCLI("--cluster", "demo", "--subcluster", "SC1", "--addr", "127.0.0.1:80", "--admin", "")
	if code == 0 || !strings.Contains(stderr, `etcd endpoint "ftp://h:1"`) {
		t.Fatalf("SLUICE_ETCD_ENDPOINTS=ftp://h:1: exit %d %q", code, stderr)
	}
}

// `lbagent drain --wait` says "drained" only once the agent's admin API
// refuses connections (it closes after the lease is revoked), not at the
// first look that failed otherwise (a reset, a timeout: the agent may well
// be running); when looks only fail that way, --timeout ends it, exit 1,
// naming the failure.
func TestDrainWaitDrainedOnlyWhenGone(t *testing.T) {
	for _, closeAfter := range []int{3, -1} { // -1: never closes
		var mu sync.Mutex
		looks, closed := 0, false
		srv := httptest.NewUnstartedServer(nil)
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path == "/drain" {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			mu.Lock()
			looks++
			n := looks
			mu.Unlock()
			if n == closeAfter {
				go func() { mu.Lock(); closed = true; mu.Unlock(); srv.Close() }() // closed: the close begun
			}
			conn, _, err := w.(http.Hijacker).Hijack() // no answer: the connection drops
			if err == nil {
				conn.Close()
			}
		})
		srv.Start()
		code, out, stderr := runCLI("drain", "--admin", strings.TrimPrefix(srv.URL, "http://"), "--wait", "--timeout", "2s")
		srv.Close()
		mu.Lock()
		gone, n := closed, looks
		mu.Unlock()
		if closeAfter > 0 {
			if code != 0 || out != "draining\ndrained\n" || !gone || n < closeAfter {
				t.Fatalf("admin API dropping %d looks, then closed: exit %d, out %q, stderr %q, closed %v after %d looks; want drained once closed",
					closeAfter-1, code, out, stderr, gone, n)
			}
			continue
		}
		if code != 1 || out != "draining\n" || !strings.Contains(stderr, "agent not known to have exited after --timeout: its admin API neither answers nor refuses") {
			t.Fatalf("admin API dropping every look: exit %d, out %q, stderr %q; want exit 1 naming the failure", code, out, stderr)
		}
	}
}
