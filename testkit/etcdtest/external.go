package etcdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DebianEtcd is where Debian's etcd-server package installs etcd (3.4.x
// in bookworm), an older real etcd the project did not embed.
const DebianEtcd = "/usr/bin/etcd"

// External is an etcd binary run as a child process, single member, on
// free loopback ports. The embedded helpers (EnableAuth, AddUser, Grant,
// ClientAs, …) work on it through the embedded Server.
type External struct {
	*Server
	bin  string
	args []string
	log  *os.File
	cmd  *exec.Cmd
}

// StartExternal starts bin with its data in dir (logs in dir/etcd.log) and
// waits until it answers.
func StartExternal(bin, dir string) (*External, error) {
	cp, err := freePort()
	if err != nil {
		return nil, err
	}
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	cu, pu := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	e := &External{Server: &Server{Endpoints: []string{cu}, Dir: dir}, bin: bin, args: []string{
		"--name", "sluice-test", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", cu, "--advertise-client-urls", cu,
		"--listen-peer-urls", pu, "--initial-advertise-peer-urls", pu,
		"--initial-cluster", "sluice-test=" + pu, "--log-level", "error",
	}}
	if e.log, err = os.OpenFile(filepath.Join(dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	if err := e.Restart(); err != nil {
		e.log.Close()
		return nil, err
	}
	return e, nil
}

// Restart starts the process again (after Stop) on the same ports and data.
func (e *External) Restart() error {
	cmd := exec.Command(e.bin, e.args...)
	cmd.Stdout, cmd.Stderr = e.log, e.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", e.bin, err)
	}
	e.cmd = cmd
	c, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Stop()
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Status(ctx, e.Endpoints[0])
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			e.Stop()
			return fmt.Errorf("%s not ready after 30s: %w (log: %s)", e.bin, err, e.log.Name())
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// Pid is the running process's id (0 when stopped), e.g. to read its CPU
// time from /proc/<pid>/stat.
func (e *External) Pid() int {
	if e.cmd == nil {
		return 0
	}
	return e.cmd.Process.Pid
}

// Stop ends the process (SIGTERM, then SIGKILL after 10s) and keeps the data.
func (e *External) Stop() {
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-done
	}
	e.cmd = nil
}

// Close stops the process and closes its log.
func (e *External) Close() {
	e.Stop()
	e.log.Close()
}
