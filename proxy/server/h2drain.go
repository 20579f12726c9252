package server

import (
	"time"

	"golang.org/x/net/http2"
)

// An answer complete before its request body (a 413 of the body limit, a
// backend answering early) ends the stream with RST_STREAM(NO_ERROR), RFC
// 9113 8.1. Sent in the same write as the answer, it makes clients still
// uploading lose the answer: curl 7.88 (nghttp2) ends with "HTTP/2 stream
// was reset" and status 000. As nginx does, the RST_STREAM goes out only
// after the answer was written, and later still: the stream drains, its
// DATA discarded and both windows credited back so the client goes on
// sending (and reading), until h2DrainBytes more came or h2DrainDelay
// passed. A client that ends the body meanwhile gets no RST_STREAM at all.

const (
	h2DrainBytes = 1 << 20                // DATA of a draining stream discarded and credited, at most
	h2DrainDelay = 100 * time.Millisecond // a stream drains this long at most
	h2DrainMax   = h2MaxStreams           // streams draining at once, at most (beyond: RST_STREAM at once)
)

// h2drain is a draining stream (c.drains).
type h2drain struct {
	left  int64     // DATA still credited
	until time.Time // the RST_STREAM is sent then
}

// drainLocked starts draining stream id, whose answer is queued complete.
func (c *h2conn) drainLocked(id uint32) {
	if c.dead {
		return
	}
	if len(c.drains) >= h2DrainMax {
		c.wbuf = appendRST(c.wbuf, id, http2.ErrCodeNo)
		return
	}
	if c.drains == nil {
		c.drains = make(map[uint32]h2drain)
	}
	delay := c.srv.drainDelay
	c.drains[id] = h2drain{left: c.srv.drainBytes, until: time.Now().Add(delay)}
	if c.drainT == nil {
		c.drainT = time.AfterFunc(delay, c.drainTimer)
	} else if len(c.drains) == 1 {
		c.drainT.Reset(delay)
	}
}

// drainTimer resets the streams whose drain time is over.
func (c *h2conn) drainTimer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	now := time.Now()
	var next time.Duration
	for id, d := range c.drains {
		if wait := d.until.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		c.endDrainLocked(id, true)
	}
	if next > 0 {
		c.drainT.Reset(next)
	}
	c.flushLocked()
}

// endDrainLocked ends stream id's drain, with its RST_STREAM(NO_ERROR) if
// rst; no drain left on a GOAWAY'd connection: it ends now.
func (c *h2conn) endDrainLocked(id uint32, rst bool) {
	delete(c.drains, id)
	if rst {
		c.wbuf = appendRST(c.wbuf, id, http2.ErrCodeNo)
	}
	if len(c.drains) == 0 {
		c.drains = nil // an idle connection holds no map
		if len(c.streams) == 0 {
			c.idleDeadlineLocked()
		}
	}
}

// drainData takes a draining stream's DATA (ok false: id is not draining).
func (c *h2conn) drainData(f *http2.DataFrame) (ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.drains[f.StreamID]
	if !ok {
		return false, nil
	}
	n := int64(f.Length)
	if n > c.recvWin {
		return true, http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	if n > 0 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(n))
	}
	d.left -= n
	switch {
	case f.StreamEnded():
		c.endDrainLocked(f.StreamID, false) // the client ended its body: nothing to reset
	case d.left <= 0:
		c.endDrainLocked(f.StreamID, true)
	default:
		if n > 0 {
			c.wbuf = appendWindowUpdate(c.wbuf, f.StreamID, uint32(n))
		}
		c.drains[f.StreamID] = d
	}
	return true, c.flushControlLocked()
}

// drainFrame takes a draining stream's trailers or RST_STREAM: its drain
// ends without our RST_STREAM (ok false: id is not draining).
func (c *h2conn) drainFrame(id uint32, ended bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.drains[id]; !ok {
		return false
	}
	if ended {
		c.endDrainLocked(id, false)
	}
	return true
}

// stopDrains: the connection ends.
func (c *h2conn) stopDrainsLocked() {
	if c.drainT != nil {
		c.drainT.Stop()
	}
	c.drains = nil
}
