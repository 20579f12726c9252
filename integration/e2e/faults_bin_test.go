//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

// binProc is a binary started by startBin.
type binProc struct {
	cmd *exec.Cmd
	log string // its stdout and stderr
}

// startBin starts one of the binaries outside a fleet (its log in logDir/
// name.log) and stops it with SIGTERM (after a SIGCONT, should it be
// stopped) at cleanup, killing it after 15 s.
func startBin(t *testing.T, logDir, name, bin string, args ...string) *binProc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, bin), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return &binProc{cmd: cmd, log: logPath}
}

// etcdAddr is the fleet's (first) etcd client address, host:port.
func etcdAddr(f *fleet.Fleet) string {
	return strings.TrimPrefix(strings.Split(f.Endpoints, ",")[0], "http://")
}

// ownScheduler stops the fleet's scheduler and starts one named id that
// reaches etcd at etcdURL (a fault proxy in front of the fleet's etcd).
func ownScheduler(t *testing.T, f *fleet.Fleet, id, etcdURL string) *binProc {
	t.Helper()
	if err := f.Schedulers[0].Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	return startBin(t, f.LogDir, "scheduler-"+id, "lbscheduler", "--id", id, "--etcd", etcdURL, "--api", "127.0.0.1:0", "--session-ttl", "3s")
}

// proxyURLs are the client URLs of pc's proxies.
func proxyURLs(f *fleet.Fleet, pc string) []string {
	var urls []string
	for _, p := range f.ProxiesOf(pc) {
		urls = append(urls, p.URL)
	}
	return urls
}
