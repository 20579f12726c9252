package fleet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Free ports for a fleet on any free ports (tests). A port the kernel hands
// out for ":0" comes from the ephemeral range (32768–60999 on Linux), the same
// range every outgoing connection's local port is drawn from: between our
// probe closing it and the child process binding it, any of the suite's
// thousands of client connections may take it ("bind: address already in
// use"). So the probe draws from below that range, where only listeners that
// ask for a port by number live, and never hands the same port out twice in
// this process.
const (
	freePortMin = 20000
	freePortMax = 32000 // exclusive; below ip_local_port_range's default start
)

var (
	portsMu sync.Mutex
	handed  = map[int]bool{}
)

// freePort returns a loopback TCP port that was free a moment ago, drawn at
// random from [freePortMin, freePortMax) and not returned before by this
// process; it falls back to a kernel-chosen port when none is found.
func freePort() int {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := freePortMin + rand.IntN(freePortMax-freePortMin)
		if handed[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		handed[p] = true
		return p
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	p := l.Addr().(*net.TCPAddr).Port
	handed[p] = true
	return p
}

// FreePort is freePort for tests that start a process of their own next to
// a fleet (or without one).
func FreePort() int { return freePort() }
