// Package freeport hands tests loopback TCP ports to bind later, in another
// process or after a restart.
//
// A port the kernel hands out for ":0" comes from the ephemeral range
// (32768–60999 on Linux), the same range every outgoing connection's local
// port is drawn from: between the probe closing it and the later bind (a
// child process, an etcd restarted on its old ports), any of the suite's
// thousands of client connections may take it ("bind: address already in
// use"). So Port draws from below that range, where only listeners that ask
// for a port by number live, and never hands the same port out twice in
// this process.
//
// Nor in two processes at once: go test runs several packages' test
// binaries side by side, and one of them may probe a port free while
// another's etcd is down for a restart on it. Each port handed out is
// claimed with an exclusive flock on a file named after it in
// os.TempDir()/sluice-freeport, held until the process exits (the kernel
// drops the lock then, whatever the exit), and a port another live process
// holds is skipped.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

const (
	// Min and Max bound the ports Port draws from: [Min, Max).
	Min = 20000
	Max = 32000 // below ip_local_port_range's default start
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
	claims []*os.File // the flocked claim files, open for the process's life
)

// claim takes port p for this process unless another live process holds
// it. Where the claim directory cannot be used it claims nothing and says
// yes (the in-process rule still holds).
func claim(p int) bool {
	dir := filepath.Join(os.TempDir(), "sluice-freeport")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return true
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	claims = append(claims, f)
	return true
}

// Port returns a loopback TCP port that was free a moment ago, drawn at
// random from [Min, Max) and not returned before by this process; it falls
// back to a kernel-chosen port when none is found.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		p := Min + rand.IntN(Max-Min)
		if handed[p] {
			continue
		}
		if !claim(p) {
			handed[p] = true // another process's; never probe it again
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		handed[p] = true
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	p := l.Addr().(*net.TCPAddr).Port
	handed[p] = true
	return p, nil
}
