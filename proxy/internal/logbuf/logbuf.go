// Package logbuf buffers the writes of a log, the way nginx's
// "access_log PATH buffer=SIZE flush=TIME" does: lines collect in memory
// and reach the file when the buffer is full, at every flush interval and
// when the process stops. One write system call then carries many lines
// instead of one each — a system call per request costs a proxy about as
// much as the rest of the access log does.
//
// Lines are never split: a line that does not fit flushes the buffer
// first, and one larger than the buffer is written on its own. A failed
// write drops what was buffered (it is counted) and the writer goes on, so
// a full disk loses lines while it is full, not forever after.
package logbuf

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Writer is a buffered io.Writer, safe for concurrent use.
type Writer struct {
	mu      sync.Mutex
	w       io.Writer
	buf     []byte
	dropped atomic.Int64 // bytes lost to failed writes
}

// New buffers up to size bytes in front of w.
func New(w io.Writer, size int) *Writer {
	return &Writer{w: w, buf: make([]byte, 0, size)}
}

// Write buffers p, flushing first when p does not fit. It reports the
// error of that flush, if any; p itself is kept.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if len(w.buf)+len(p) > cap(w.buf) {
		err = w.flushLocked()
	}
	if len(p) > cap(w.buf) {
		if _, werr := w.w.Write(p); werr != nil {
			w.dropped.Add(int64(len(p)))
			return 0, werr
		}
		return len(p), err
	}
	w.buf = append(w.buf, p...)
	return len(p), err
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.w.Write(w.buf)
	if err != nil {
		w.dropped.Add(int64(len(w.buf) - n))
	}
	w.buf = w.buf[:0]
	return err
}

// Dropped is the number of bytes lost to failed writes.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Run flushes every interval until ctx ends, then once more.
func (w *Writer) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			_ = w.Flush()
			return
		case <-t.C:
			_ = w.Flush()
		}
	}
}
