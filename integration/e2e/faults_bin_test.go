//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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
