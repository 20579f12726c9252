// Package bufpool is the proxy's one pool of copy buffers: the 32 KiB
// buffers that stream request and response bodies, shared by the fast
// HTTP/1.1 client (forward), the fasthttp front (server/fast.go) and
// httputil.ReverseProxy (through HTTPUtil).
package bufpool

import "sync"

// Size is the length of every buffer.
const Size = 32 << 10

var pool = sync.Pool{New: func() any { b := make([]byte, Size); return &b }}

// Get returns a buffer of Size bytes; give it back with Put.
func Get() *[]byte { return pool.Get().(*[]byte) }

// Put returns b to the pool; b must not be used afterwards.
func Put(b *[]byte) { pool.Put(b) }

// HTTPUtil is the pool as an httputil.BufferPool.
type HTTPUtil struct{}

// Get implements httputil.BufferPool.
func (HTTPUtil) Get() []byte { return *Get() }

// Put implements httputil.BufferPool.
func (HTTPUtil) Put(b []byte) { Put(&b) }
