package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Sluice's HTTP/2 server (--h2-server sluice, issues 20 and 23) serves the
// TLS front's ALPN "h2" connections. golang.org/x/net/http2's Framer reads
// and checks the frames (CONTINUATION and HPACK decoding included) and its
// hpack package encodes the answers' headers; the connection's state
// machine is ours:
//
//   - One goroutine per connection reads the frames and keeps the state
//     (streams, flow-control windows, SETTINGS); a handler runs in a
//     goroutine per stream. There is no channel hop: the handler writes
//     frames into the connection's write buffer under the connection's
//     mutex, and whoever finds no write under way writes the buffer to the
//     socket (the others' frames go out in the same write). A complete
//     small answer is one HEADERS and one DATA with END_STREAM in one write.
//   - An idle connection (no open stream) holds no frame buffer: the
//     Framer (its read buffer) is taken from a pool when a frame arrives and
//     returned when the last stream ends; the goroutine waits for the next
//     frame's header in a 9-byte read. crypto/tls's read buffers are
//     released then as the fasthttp front's parked connections do. One idle
//     for ParkIdleAfter is parked (h2park.go): its goroutine, grown by the
//     requests' reads, ends, and a fresh one with a small stack waits for
//     the socket to become readable.
//   - The rapid-reset guard (h2reset.go) is the same handler wrapper as on
//     net/http's server; its "Connection: close" starts a graceful GOAWAY.

// H2 server kinds (FrontOptions.H2Server, --h2-server).
const (
	H2ServerXNet   = "xnet"
	H2ServerSluice = "sluice"
)

const (
	h2MaxStreams     = 250      // SETTINGS_MAX_CONCURRENT_STREAMS, as net/http's
	h2StreamWindow   = 1 << 20  // our initial stream receive window, as net/http's
	h2ConnWindow     = 1 << 20  // our connection receive window
	h2MaxReadFrame   = 1 << 20  // SETTINGS_MAX_FRAME_SIZE we accept
	h2WriteHigh      = 64 << 10 // a handler waits while the write buffer is above this
	h2WriteMax       = 4 << 20  // control frames queued beyond this: the peer does not read
	h2BodyChunk      = 16 << 10 // a response body is buffered up to this before it is sent
	h2GoAwayLinger   = time.Second
	h2MaxHandlersMul = 4 // handlers still running (reset streams) beyond 4×MaxStreams: ENHANCE_YOUR_CALM
)

// h2Server serves HTTP/2 connections that completed their TLS handshake.
type h2Server struct {
	handler      http.Handler
	connContext  func(context.Context, net.Conn) context.Context
	connState    func(net.Conn, http.ConnState)
	errorLog     *log.Logger
	maxHeader    uint32
	preface      time.Duration // bounds the client preface
	idle         time.Duration
	readTimeout  time.Duration
	writeTimeout time.Duration
	maxStreams   int           // SETTINGS_MAX_CONCURRENT_STREAMS
	streamWin    int64         // our initial stream receive window
	connWin      int64         // our connection receive window
	drainBytes   int64         // h2DrainBytes
	drainDelay   time.Duration // h2DrainDelay
	parkAfter    time.Duration // the park sweep's tick (h2park.go)
	tick         atomic.Int64  // the park sweep's ticks, from 1
	kicks        atomic.Int64  // connections the sweep kicked (tests read it)
	sweepStop    chan struct{}
	sweepDone    chan struct{}
	sweepOnce    sync.Once // the sweep started (serve) or never will (stopSweep)
	stopOnce     sync.Once

	mu      sync.Mutex
	conns   map[*h2conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

func newH2Server(hs *http.Server, preface, parkAfter time.Duration) *h2Server {
	s := &h2Server{parkAfter: parkAfter, sweepStop: make(chan struct{}), sweepDone: make(chan struct{}),
		handler: hs.Handler, connContext: hs.ConnContext, connState: hs.ConnState, errorLog: hs.ErrorLog,
		maxHeader: uint32(hs.MaxHeaderBytes), preface: preface, idle: hs.IdleTimeout,
		readTimeout: hs.ReadTimeout, writeTimeout: hs.WriteTimeout,
		maxStreams: h2MaxStreams, streamWin: h2StreamWindow, connWin: h2ConnWindow,
		drainBytes: h2DrainBytes, drainDelay: h2DrainDelay,
		conns: make(map[*h2conn]struct{}),
	}
	if s.maxHeader == 0 {
		s.maxHeader = http.DefaultMaxHeaderBytes
	}
	if s.idle == 0 {
		s.idle = hs.ReadTimeout
	}
	s.tick.Store(1)
	return s
}

// h2Reader is what reading frames needs beyond the connection's own state:
// pooled, held only while a stream is open or a frame is being read.
type h2Reader struct {
	fr  *http2.Framer
	src h2Source
}

// h2Source is the Framer's reader: the frame header the connection's
// goroutine read (without a Framer), then the connection.
type h2Source struct {
	c   *h2conn
	off int // of c.hdr given
}

func (s *h2Source) Read(p []byte) (int, error) {
	if s.off < len(s.c.hdr) {
		n := copy(p, s.c.hdr[s.off:])
		s.off += n
		return n, nil
	}
	return s.c.tc.Read(p)
}

var h2ReaderPool = sync.Pool{New: func() any {
	r := &h2Reader{}
	r.fr = http2.NewFramer(io.Discard, &r.src)
	r.fr.SetMaxReadFrameSize(h2MaxReadFrame)
	return r
}}

// h2encPool holds HPACK encoders without a dynamic table: stateless once
// their first field (the table size update) is written, so any connection
// may use any of them (answers' headers are not indexed, as nginx does).
var h2encPool = sync.Pool{New: func() any {
	e := &h2Encoder{}
	e.enc = hpack.NewEncoder(&e.buf)
	e.enc.SetMaxDynamicTableSizeLimit(0)
	_ = e.enc.WriteField(hpack.HeaderField{Name: "x", Value: "x"}) // the size update, discarded
	e.buf.b = e.buf.b[:0]
	return e
}}

type h2Encoder struct {
	enc *hpack.Encoder
	buf appendBuf
}

type appendBuf struct{ b []byte }

func (a *appendBuf) Write(p []byte) (int, error) { a.b = append(a.b, p...); return len(p), nil }

// h2conn is one HTTP/2 connection: one allocation (768-byte size class)
// with its copy of the TLS state and its HPACK decoder, which an idle
// connection keeps (the decoder's dynamic table is the client's).
type h2conn struct {
	srv    *h2Server
	tc     *tls.Conn
	rec    *recordConn // under tc: it can wait for readability (nil: never parked)
	remote string
	tlsCS  tls.ConnectionState // the requests' r.TLS
	// ctx is the streams' parent, not cancelable: each stream open when
	// the connection ends is canceled by close (a cancelable parent would
	// hold a children map and a channel per idle connection, ~0.5 KiB).
	ctx context.Context

	// the connection goroutine's own
	hdr         [9]byte      // the next frame's header
	hdrN        int          // its bytes read so far
	kick        atomic.Int32 // h2Busy, h2Waiting (for a frame header), h2Kicking, h2Kicked (h2park.go)
	parkedNow   atomic.Bool  // parked: waiting for the socket to become readable (tests read it)
	dec         hpack.Decoder
	maxClientID uint32
	sawSettings bool
	handlers    sync.WaitGroup

	mu         sync.Mutex
	streams    map[uint32]*h2stream // nil while idle (no open stream)
	running    int                  // handlers not returned (reset streams' included)
	sendWin    int64                // the peer's connection window
	peerWin    int32                // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame  int                  // the peer's SETTINGS_MAX_FRAME_SIZE
	recvWin    int64                // what the peer may still send on the connection
	recvUnack  int64                // connection window consumed, not yet given back
	wbuf       []byte
	spare      []byte
	flushing   bool
	wcond      sync.Cond // the write buffer drained
	werr       error
	dead       bool // closed: no frame is written any more
	goAway     bool // GOAWAY sent: no new stream
	goAwayID   uint32
	lastWriteD time.Time          // the write deadline last set
	active     bool               // ConnState: StateActive told (StateIdle when the last stream ends)
	drains     map[uint32]h2drain // streams answered before their body ended (h2drain.go)
	drainT     *time.Timer
	rdl        time.Time // the read deadline idleDeadlineLocked set
	idleSince  int64     // the park sweep's tick the connection became idle at (0: busy)
}

// serve runs the connection on its own goroutine until it ends.
func (s *h2Server) serve(tc *tls.Conn, rec *recordConn) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		tc.Close()
		return
	}
	s.sweepOnce.Do(func() { go s.sweep() })
	c := &h2conn{srv: s, tc: tc, rec: rec,
		sendWin: 65535, peerWin: 65535, peerFrame: 16384, recvWin: 65535}
	c.wcond.L = &c.mu
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go c.serve()
}

func (c *h2conn) serve() {
	s := c.srv
	c.remote = c.tc.RemoteAddr().String()
	c.tlsCS = c.tc.ConnectionState()
	ctx := context.Background()
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, c.tc.LocalAddr())
	if s.connContext != nil {
		ctx = s.connContext(ctx, c.tc)
	}
	c.ctx = ctx
	c.state(http.StateNew)
	if err := c.start(); err != nil {
		c.end(err)
		return
	}
	c.loop()
}

// loop reads frames until the connection ends, or parks it: then a fresh
// goroutine waits for its next frame (h2park.go) and this one ends.
func (c *h2conn) loop() {
	err := c.frames()
	if err == errParked {
		c.parkedNow.Store(true)
		go c.parked()
		return
	}
	c.end(err)
}

// end ends the connection after its error (a ConnectionError is sent as
// GOAWAY first).
func (c *h2conn) end(err error) {
	c.close(err)
	c.handlers.Wait()
	c.state(http.StateClosed)
	s := c.srv
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

func (c *h2conn) state(st http.ConnState) {
	if c.srv.connState != nil {
		c.srv.connState(c.tc, st)
	}
}

func (c *h2conn) logf(format string, args ...any) {
	if c.srv.errorLog != nil {
		c.srv.errorLog.Printf(format, args...)
	}
}

// start reads the preface and sends our SETTINGS.
func (c *h2conn) start() error {
	var p [24]byte
	_ = c.tc.SetReadDeadline(time.Now().Add(c.srv.preface))
	if _, err := io.ReadFull(c.tc, p[:]); err != nil {
		return err
	}
	if string(p[:]) != http2.ClientPreface {
		return errors.New("http2: bad client preface")
	}
	c.dec = *hpack.NewDecoder(4096, nil) // in the connection's own allocation
	c.dec.SetMaxStringLength(int(c.srv.maxHeader))
	c.mu.Lock()
	c.wbuf = appendSettings(c.wbuf,
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.srv.maxStreams)},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(c.srv.streamWin)},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: h2MaxReadFrame},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.maxHeader + 10*32})
	if c.srv.connWin > 65535 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.srv.connWin-65535))
		c.recvWin = c.srv.connWin
	}
	c.flushLocked()
	c.idleDeadlineLocked()
	c.mu.Unlock()
	return nil
}

// frames reads frame after frame; its error ends the connection, but
// errParked: the connection is parked.
func (c *h2conn) frames() error {
	for {
		if err := c.awaitFrame(); err != nil {
			return err
		}
		rd := h2ReaderPool.Get().(*h2Reader)
		rd.src.c, rd.src.off = c, 0
		rd.fr.ReadMetaHeaders = &c.dec
		rd.fr.MaxHeaderListSize = c.srv.maxHeader + 10*32 // as net/http: MaxHeaderBytes and 32 bytes for each of 10 fields
		f, err := rd.fr.ReadFrame()
		if err == nil {
			err = c.process(f)
		}
		if se := (http2.StreamError{}); err == nil || errors.As(err, &se) {
			// between two frames: the Framer holds nothing of this connection
			rd.src.c, rd.fr.ReadMetaHeaders = nil, nil
			h2ReaderPool.Put(rd)
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) { // a malformed HEADERS: the stream alone
				if err := c.streamError(se.StreamID, se.Code); err != nil {
					return err
				}
				continue
			}
			if errors.Is(err, http2.ErrFrameTooLarge) {
				return http2.ConnectionError(http2.ErrCodeFrameSize)
			}
			return err
		}
	}
}

// idleDeadlineLocked: a connection with no open stream ends after the idle
// timeout (GOAWAY'd: now); with streams, reads have no deadline.
// It also tells the park sweep when the connection became idle.
func (c *h2conn) idleDeadlineLocked() {
	c.idleSince = 0
	switch {
	case len(c.streams) > 0 || len(c.drains) > 0:
		c.rdl = time.Time{}
	case c.goAway:
		c.rdl = time.Now()
	default:
		c.idleSince = c.srv.tick.Load()
		if c.srv.idle <= 0 {
			return
		}
		c.rdl = time.Now().Add(c.srv.idle)
	}
	_ = c.tc.SetReadDeadline(c.rdl)
}

// awaitFrame reads the next frame's header, without a Framer: a
// connection waiting for its client holds no frame buffer. No open stream:
// crypto/tls's read buffers are released first, and the read ends at the
// idle timeout (then GOAWAY), at the GOAWAY of a shutdown, or at the park
// sweep's kick (errParked, h2park.go).
func (c *h2conn) awaitFrame() error {
	c.mu.Lock()
	quiet := len(c.streams) == 0
	c.mu.Unlock()
	if quiet {
		releaseTLSBuffers(c.tc, parkKeep)
	}
	for c.hdrN < len(c.hdr) {
		c.kick.Store(h2Waiting)
		n, err := c.tc.Read(c.hdr[c.hdrN:])
		c.hdrN += n
		if !c.kick.CompareAndSwap(h2Waiting, h2Busy) {
			if err = c.kicked(err); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return c.readFailed(err)
		}
	}
	c.hdrN = 0
	return nil
}

// readFailed is the error that ends the connection after err, its read's
// while it waited for a frame: GOAWAY at the idle timeout.
func (c *h2conn) readFailed(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ne net.Error
	if !c.goAway && len(c.streams) == 0 && len(c.drains) == 0 && errors.As(err, &ne) && ne.Timeout() {
		c.sendGoAwayLocked(http2.ErrCodeNo) // the idle timeout
		return errGoneAway
	}
	if c.goAway && len(c.streams) == 0 && len(c.drains) == 0 {
		return errGoneAway
	}
	return err
}

var errGoneAway = errors.New("http2: connection gone away")

// close ends the connection: GOAWAY for a connection error, the socket
// closed, every stream canceled.
func (c *h2conn) close(err error) {
	c.mu.Lock()
	var ce http2.ConnectionError
	if errors.As(err, &ce) && !c.dead {
		c.sendGoAwayLocked(http2.ErrCode(ce))
	}
	for c.flushing { // what is queued (the GOAWAY) goes out first
		c.wcond.Wait()
	}
	linger := c.goAway && !c.dead
	c.dead = true
	c.stopDrainsLocked()
	streams := make([]*h2stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	for _, st := range streams {
		st.closeLocked(errClientDisconnected)
	}
	c.wcond.Broadcast()
	c.mu.Unlock()
	if linger {
		// Closing with unread bytes would reset the connection and could
		// destroy the GOAWAY before the client read it: read and drop what
		// comes until the client closes, a second at most.
		_ = c.tc.SetReadDeadline(time.Now().Add(h2GoAwayLinger))
		var b [512]byte
		for {
			if _, err := c.tc.Read(b[:]); err != nil {
				break
			}
		}
	}
	c.tc.Close()
}

var errClientDisconnected = errors.New("client disconnected")

// process handles one frame on the connection goroutine.
func (c *h2conn) process(f http2.Frame) error {
	if !c.sawSettings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
	}
	c.mu.Lock()
	goAway := c.goAway
	c.mu.Unlock()
	if goAway && f.Header().StreamID > c.goAwayID {
		if d, ok := f.(*http2.DataFrame); ok {
			return c.refundConn(d.Length)
		}
		if _, ok := f.(*http2.MetaHeadersFrame); ok {
			return nil
		}
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.PingFrame:
		if f.StreamID != 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		c.wbuf = appendFrameHeader(c.wbuf, 8, http2.FramePing, http2.FlagPingAck, 0)
		c.wbuf = append(c.wbuf, f.Data[:]...)
		err := c.flushControlLocked()
		c.mu.Unlock()
		return err
	case *http2.RSTStreamFrame:
		return c.processReset(f)
	case *http2.PriorityFrame:
		if f.StreamID == f.StreamDep {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client goes: finish what is open, start nothing new.
		c.mu.Lock()
		c.sendGoAwayLocked(http2.ErrCodeNo)
		c.mu.Unlock()
		if f.ErrCode != http2.ErrCodeNo {
			return errGoneAway
		}
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	default: // unknown frame types are ignored
		return nil
	}
}

func (c *h2conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if f.NumSettings() > 100 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerWin)
			c.peerWin = int32(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
				if st.sendWin > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				st.cond.Broadcast()
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.wbuf = appendFrameHeader(c.wbuf, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	return c.flushControlLocked()
}

func (c *h2conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sendWin += int64(f.Increment)
		if c.sendWin > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		for _, st := range c.streams {
			st.cond.Broadcast()
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		return nil
	}
	if f.Increment == 0 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > 1<<31-1 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.cond.Broadcast()
	return nil
}

func (c *h2conn) processReset(f *http2.RSTStreamFrame) error {
	if f.StreamID > c.maxClientID {
		return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
	}
	if c.drainFrame(f.StreamID, true) {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[f.StreamID]; st != nil {
		st.closeLocked(errStreamReset)
	}
	return nil
}

var errStreamReset = errors.New("http2: stream reset by the client")

// streamError resets one stream (RST_STREAM with code).
func (c *h2conn) streamError(id uint32, code http2.ErrCode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[id]; st != nil {
		st.closeLocked(errStreamReset)
	}
	c.wbuf = appendRST(c.wbuf, id, code)
	return c.flushControlLocked()
}

// refundConn takes n bytes from the connection window for DATA nobody
// reads and gives them back at once.
func (c *h2conn) refundConn(n uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(n) > c.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	if n > 0 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, n)
		return c.flushControlLocked()
	}
	return nil
}

func (c *h2conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	if id == 0 || id > c.maxClientID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if ok, err := c.drainData(f); ok {
		return err
	}
	c.mu.Lock()
	st := c.streams[id]
	if st == nil || st.remoteDone {
		c.mu.Unlock()
		if err := c.refundConn(f.Length); err != nil {
			return err
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	defer c.mu.Unlock()
	if int64(f.Length) > c.recvWin {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	if int64(f.Length) > st.recvWin {
		c.recvWin -= int64(f.Length)
		c.giveBackLocked(int64(f.Length), nil, 0)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	c.recvWin -= int64(f.Length)
	st.recvWin -= int64(f.Length)
	data := f.Data()
	pad := int64(f.Length) - int64(len(data))
	st.got += int64(len(data))
	if st.declLen >= 0 && (st.got > st.declLen || (f.StreamEnded() && st.got != st.declLen)) {
		c.giveBackLocked(int64(f.Length), nil, 0)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if st.bodyClosed {
		// the handler closed the body: the connection's share comes back
		c.giveBackLocked(int64(f.Length), nil, 0)
	} else {
		st.body = append(st.body, data...)
		if pad > 0 {
			c.giveBackLocked(pad, st, pad)
		}
	}
	if f.StreamEnded() {
		st.remoteDone, st.bodyEOF = true, true
	}
	st.cond.Broadcast()
	return c.flushControlLocked()
}

// giveBackLocked counts n consumed bytes of the connection window and k of
// st's, and queues WINDOW_UPDATEs once half a window is due.
func (c *h2conn) giveBackLocked(n int64, st *h2stream, k int64) {
	c.recvUnack += n
	if c.recvUnack >= c.srv.connWin/2 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.recvUnack))
		c.recvWin += c.recvUnack
		c.recvUnack = 0
	}
	if st != nil && !st.remoteDone && !st.closed {
		st.recvUnack += k
		if st.recvUnack >= c.srv.streamWin/2 {
			c.wbuf = appendWindowUpdate(c.wbuf, st.id, uint32(st.recvUnack))
			st.recvWin += st.recvUnack
			st.recvUnack = 0
		}
	}
}

// sendGoAwayLocked sends GOAWAY once: streams above the last one opened are
// not served.
func (c *h2conn) sendGoAwayLocked(code http2.ErrCode) {
	if c.goAway && code == http2.ErrCodeNo {
		return
	}
	c.goAway = true
	c.goAwayID = c.maxClientID
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], c.maxClientID)
	binary.BigEndian.PutUint32(b[4:], uint32(code))
	c.wbuf = appendFrameHeader(c.wbuf, 8, http2.FrameGoAway, 0, 0)
	c.wbuf = append(c.wbuf, b[:]...)
	c.flushLocked()
	c.idleDeadlineLocked() // no stream: the connection ends now
}

// startGracefulShutdown: GOAWAY; the connection ends once its streams did.
func (c *h2conn) startGracefulShutdown() {
	c.mu.Lock()
	c.sendGoAwayLocked(http2.ErrCodeNo)
	c.mu.Unlock()
}

// flushControlLocked writes what the connection goroutine queued; a peer
// that reads nothing while control frames pile up is a connection error.
func (c *h2conn) flushControlLocked() error {
	if len(c.wbuf) > h2WriteMax {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.flushLocked()
	return nil
}

// flushLocked writes the write buffer unless another goroutine is writing
// (it writes what was added meanwhile). c.mu is held, and released during
// the socket writes.
func (c *h2conn) flushLocked() {
	if c.flushing || c.dead || len(c.wbuf) == 0 {
		if c.dead {
			c.wbuf = c.wbuf[:0]
		}
		return
	}
	c.flushing = true
	for len(c.wbuf) > 0 && !c.dead {
		b := c.wbuf
		c.wbuf = c.spare[:0]
		if d := c.srv.idle; d > 0 {
			// A client that reads nothing for that long is gone. The deadline
			// moves at most once a second (a quarter of d when shorter: the
			// idle timeout's GOAWAY, d after the last write, must not find it
			// passed, as a write timeout breaks crypto/tls's record sequence).
			if now := time.Now(); now.Sub(c.lastWriteD) > min(time.Second, d/4) {
				c.lastWriteD = now
				_ = c.tc.SetWriteDeadline(now.Add(d))
			}
		}
		c.mu.Unlock()
		_, err := c.tc.Write(b)
		c.mu.Lock()
		c.spare = b[:0]
		if cap(c.spare) > 4*h2WriteHigh {
			c.spare = nil
		}
		if err != nil {
			c.werr = err
			c.dead = true
			c.wbuf = c.wbuf[:0]
			c.tc.Close() // the reader ends, and with it the connection
		}
	}
	c.flushing = false
	if len(c.streams) == 0 {
		c.wbuf, c.spare = nil, nil // idle: no write buffer held
	}
	c.wcond.Broadcast()
}

func appendFrameHeader(b []byte, n int, t http2.FrameType, flags http2.Flags, id uint32) []byte {
	return append(b, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
}

func appendSettings(b []byte, ss ...http2.Setting) []byte {
	b = appendFrameHeader(b, 6*len(ss), http2.FrameSettings, 0, 0)
	for _, s := range ss {
		b = append(b, byte(s.ID>>8), byte(s.ID), byte(s.Val>>24), byte(s.Val>>16), byte(s.Val>>8), byte(s.Val))
	}
	return b
}

func appendWindowUpdate(b []byte, id, n uint32) []byte {
	b = appendFrameHeader(b, 4, http2.FrameWindowUpdate, 0, id)
	return append(b, byte(n>>24)&0x7f, byte(n>>16), byte(n>>8), byte(n))
}

func appendRST(b []byte, id uint32, code http2.ErrCode) []byte {
	b = appendFrameHeader(b, 4, http2.FrameRSTStream, 0, id)
	return binary.BigEndian.AppendUint32(b, uint32(code))
}

// shutdown sends GOAWAY on every connection and waits until they ended or
// ctx is done (then closes them).
func (s *h2Server) shutdown(ctx context.Context) error {
	s.stopSweep()
	s.mu.Lock()
	s.closing = true
	conns := make([]*h2conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.startGracefulShutdown()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.closeAll()
		<-done
		return ctx.Err()
	}
}

// closeAll closes every connection now and waits for them to end.
func (s *h2Server) closeAll() {
	s.stopSweep()
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.tc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// lowerHeader is k in lower case (HTTP/2 field names), common names
// without an allocation.
func lowerHeader(k string) string {
	if v, ok := commonLower[k]; ok {
		return v
	}
	return strings.ToLower(k)
}

var commonLower = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{"Accept", "Accept-Ranges", "Age", "Cache-Control", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Type", "Cookie", "Date", "Etag", "Expires",
		"Last-Modified", "Location", "Server", "Set-Cookie", "Vary", "Via", "Www-Authenticate",
		"X-Sluice-Reason", "X-Content-Type-Options", "Content-Disposition", "Strict-Transport-Security",
		"Access-Control-Allow-Origin", "Link", "Retry-After", "Trailer", "X-Request-Id"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()
