// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, for tests: pass-through, blackhole (connections are
// accepted and stay open but nothing flows), reject (every connection is
// reset at once), drop-all (reset the connections open now), and pause /
// resume (bytes stop flowing and are delivered later, unharmed).
//
// It listens on loopback only. Every method is safe for concurrent use.
package faultproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Mode is how the proxy treats traffic.
type Mode int

const (
	// PassThrough forwards bytes both ways.
	PassThrough Mode = iota
	// Blackhole accepts connections and keeps them open, but forwards
	// nothing: bytes read are discarded. Leaving Blackhole resets every
	// connection that lost bytes (its stream is corrupt).
	Blackhole
	// Reject resets every new connection at once (as if the server were down).
	Reject
)

func (m Mode) String() string {
	switch m {
	case PassThrough:
		return "pass-through"
	case Blackhole:
		return "blackhole"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Proxy forwards TCP connections from Addr() to a target address.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond // signalled when paused or mode changes
	mode    Mode
	paused  bool
	closed  bool
	conns   map[*pair]struct{}
	accepts uint64

	wg sync.WaitGroup
}

// pair is one client connection and, unless blackholed at accept, its
// upstream connection.
type pair struct {
	client, server net.Conn
	// tainted: bytes were discarded while blackholed.
	tainted bool
}

// New starts a proxy on 127.0.0.1 (a port picked by the OS) that forwards to
// target ("host:port"). Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*pair]struct{})}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "http://" + Addr(), handy for etcd endpoints.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Accepted is how many connections were accepted so far.
func (p *Proxy) Accepted() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// SetMode switches the mode. Switching to Reject also resets every open
// connection; leaving Blackhole resets the connections that lost bytes.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	old := p.mode
	p.mode = m
	var kill []*pair
	for c := range p.conns {
		if m == Reject || (old == Blackhole && m != Blackhole && (c.tainted || c.server == nil)) {
			kill = append(kill, c)
		}
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range kill {
		c.reset()
	}
}

// DropAll resets every connection open now; new ones are handled by the mode.
func (p *Proxy) DropAll() {
	p.mu.Lock()
	kill := make([]*pair, 0, len(p.conns))
	for c := range p.conns {
		kill = append(kill, c)
	}
	p.mu.Unlock()
	for _, c := range kill {
		c.reset()
	}
}

// Pause stops forwarding without losing bytes: they wait in the kernel
// buffers until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume undoes Pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Conns is the number of connections open now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, resets every connection and waits for every
// goroutine of the proxy to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		p.accepts++
		mode, closed := p.mode, p.closed
		p.mu.Unlock()
		if closed || mode == Reject {
			resetConn(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c, mode)
	}
}

func (p *Proxy) serve(client net.Conn, mode Mode) {
	defer p.wg.Done()
	pr := &pair{client: client}
	if mode != Blackhole {
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			resetConn(client)
			return
		}
		pr.server = s
	}
	if !p.track(pr) {
		pr.reset()
		return
	}
	defer p.untrack(pr)
	if pr.server == nil {
		// Accepted while blackholed: swallow everything until reset.
		p.pipe(pr, client, io.Discard)
		pr.reset()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(pr, client, pr.server); done <- struct{}{} }()
	go func() { p.pipe(pr, pr.server, client); done <- struct{}{} }()
	<-done
	pr.reset()
	<-done
}

func (p *Proxy) track(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[pr] = struct{}{}
	return true
}

func (p *Proxy) untrack(pr *pair) {
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
}

// pipe copies src to dst honouring the mode and pause, until src fails.
func (p *Proxy) pipe(pr *pair, src net.Conn, dst io.Writer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.deliver(pr, dst, buf[:n]) {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// deliver waits while paused, then writes b to dst or discards it when
// blackholed. It reports false when the connection must end.
func (p *Proxy) deliver(pr *pair, dst io.Writer, b []byte) bool {
	p.mu.Lock()
	for p.paused && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		p.mu.Unlock()
		return false
	}
	if p.mode == Blackhole || dst == io.Discard {
		pr.tainted = true
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	_, err := dst.Write(b)
	return err == nil
}

func (pr *pair) reset() {
	resetConn(pr.client)
	if pr.server != nil {
		resetConn(pr.server)
	}
}

// resetConn closes c with an RST rather than a FIN, as a crashed peer or a
// firewall would.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
