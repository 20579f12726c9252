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
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

const (
	// Min and Max bound the ports Port draws from: [Min, Max).
	Min = 20000
	Max = 32000 // below ip_local_port_range's default start
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

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
