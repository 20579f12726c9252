package freeport

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// Port never repeats a port and stays below the ephemeral range, where
// client connections cannot take it between the probe and the later bind.
func TestPortBelowEphemeralRangeAndUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 500 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if p < Min || p >= Max {
			t.Fatalf("port %d outside [%d, %d)", p, Min, Max)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// A port another process has claimed (its flock held) is never handed out
// here, even while it is free to bind (that process's etcd restarting).
func TestPortSkipsAnotherProcessClaim(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") == "1" {
		// The other process: claim ports, print them, hold them until stdin closes.
		for range 300 {
			p, err := Port()
			if err != nil {
				os.Exit(2)
			}
			fmt.Println(p)
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPortSkipsAnotherProcessClaim$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	theirs := map[int]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		p, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		theirs[p] = true
	}
	if len(theirs) != 300 {
		t.Fatalf("child claimed %d ports, want 300", len(theirs))
	}
	// The child's ports are free to bind (it only claimed them); draw
	// enough here that, without the claims, some would repeat theirs.
	for range 3000 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if theirs[p] {
			t.Fatalf("port %d handed out here while another process holds it", p)
		}
	}
}
