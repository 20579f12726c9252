package main

import (
	"math/rand/v2"
	"net"
	"strings"
	"testing"
)

// A block with one port taken is skipped; the next candidate is answered.
func TestFreeBlockSkipsATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	free, err := freeBlock(4, func() int { return portMin + rand.IntN(portMax-portMin-4) })
	if err != nil {
		t.Fatal(err)
	}
	picks := []int{taken - 2, free} // taken-2..taken+1 holds the taken port
	i := 0
	got, err := freeBlock(4, func() int { p := picks[i]; i++; return p })
	if err != nil {
		t.Fatal(err)
	}
	if got != free || i != 2 {
		t.Fatalf("freeBlock = %d after %d picks, want %d after 2 (port %d is taken)", got, i, free, taken)
	}
}

func TestFreeBlockRefusesABadCount(t *testing.T) {
	for _, n := range []int{0, -1, portMax - portMin} {
		if _, err := freeBlock(n, func() int { return portMin }); err == nil || !strings.Contains(err.Error(), "-n") {
			t.Errorf("freeBlock(%d) err = %v, want one naming -n", n, err)
		}
	}
}
