package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
)

// Port blocks are drawn from below Linux's ephemeral range (32768-60999),
// where only listeners asking for a port by number live (testkit/freeport's
// rule): a port above it may be taken by any outgoing connection between
// the probe and the bind.
const (
	portMin = 20000
	portMax = 32000
)

// ports prints the first port of a block of n consecutive loopback ports
// that were all free a moment ago, so a script can lay its listeners out
// as base+offset without colliding with other fleets on the machine.
func ports(args []string) error {
	fs := flag.NewFlagSet("ports", flag.ExitOnError)
	n := fs.Int("n", 100, "consecutive ports wanted")
	fs.Parse(args)
	base, err := freeBlock(*n, func() int { return portMin + rand.IntN(portMax-portMin-*n) })
	if err != nil {
		return err
	}
	fmt.Println(base)
	return nil
}

// freeBlock tries up to 100 bases from pick and answers the first whose n
// ports [base, base+n) can all be bound on 127.0.0.1 at once.
func freeBlock(n int, pick func() int) (int, error) {
	if n <= 0 || n >= portMax-portMin {
		return 0, fmt.Errorf("ports: -n %d: want 1 to %d", n, portMax-portMin-1)
	}
	for range 100 {
		base := pick()
		if blockFree(base, n) {
			return base, nil
		}
	}
	return 0, errors.New("ports: no free block found in 100 tries")
}

func blockFree(base, n int) bool {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}
