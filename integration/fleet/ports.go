package fleet

import "github.com/sluicelb/sluice/testkit/freeport"

// freePort returns a loopback port for a child process to bind
// (testkit/freeport: below the ephemeral range, never twice).
func freePort() int {
	p, err := freeport.Port()
	if err != nil {
		panic(err)
	}
	return p
}

// FreePort is freePort for tests that start a process of their own next to
// a fleet (or without one).
func FreePort() int { return freePort() }
