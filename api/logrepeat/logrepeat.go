// Package logrepeat keeps a failing dependency from flooding a log: an
// identical warning or error (same level, message and attributes) is
// written once per window; the next one after the window carries the count
// of those left out: "probe failed (repeated 57 times in 60 s)".
//
// There is no timer: if the line stops repeating, the count of the last
// window is not written (the first line of the window was). Lines below
// warning level pass through unchanged.
package logrepeat

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"
)

// DefaultWindow is how long identical lines are held back.
const DefaultWindow = time.Minute

// maxKeys bounds the lines remembered; past it, expired ones are dropped.
const maxKeys = 1024

// Handler wraps another slog.Handler.
type Handler struct {
	inner  slog.Handler
	window time.Duration
	prefix string // the attributes and groups added by WithAttrs/WithGroup
	st     *state
}

type state struct {
	mu    sync.Mutex
	lines map[string]*seen
}

type seen struct {
	start   time.Time
	dropped int
}

// New wraps inner; window 0 means DefaultWindow.
func New(inner slog.Handler, window time.Duration) *Handler {
	if window <= 0 {
		window = DefaultWindow
	}
	return &Handler{inner: inner, window: window, st: &state{lines: map[string]*seen{}}}
}

func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	c.prefix = h.prefix + render(as)
	return &c
}

func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	c.prefix = h.prefix + "(" + name + ")"
	return &c
}

func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return h.inner.Handle(ctx, r)
	}
	var as []slog.Attr
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	key := fmt.Sprintf("%s|%s|%s|%s", r.Level, r.Message, h.prefix, render(as))
	now := time.Now() // tests run in a synctest bubble: its clock is fake
	h.st.mu.Lock()
	s := h.st.lines[key]
	switch {
	case s != nil && now.Sub(s.start) < h.window:
		s.dropped++
		h.st.mu.Unlock()
		return nil
	case s != nil && s.dropped > 0:
		r.Message = fmt.Sprintf("%s (repeated %d times in %s)", r.Message, s.dropped+1, seconds(now.Sub(s.start)))
	}
	if s == nil {
		h.st.evict(now, h.window)
		s = &seen{}
		h.st.lines[key] = s
	}
	s.start, s.dropped = now, 0
	h.st.mu.Unlock()
	return h.inner.Handle(ctx, r)
}

// evict forgets lines whose window is over when too many are remembered.
func (st *state) evict(now time.Time, window time.Duration) {
	if len(st.lines) < maxKeys {
		return
	}
	for k, s := range st.lines {
		if now.Sub(s.start) >= window {
			delete(st.lines, k)
		}
	}
	if len(st.lines) >= maxKeys { // every line is recent: start over
		clear(st.lines)
	}
}

func seconds(d time.Duration) string {
	return fmt.Sprintf("%d s", int64(math.Round(d.Seconds())))
}

func render(as []slog.Attr) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Key)
		b.WriteByte('=')
		b.WriteString(a.Value.Resolve().String())
		b.WriteByte(' ')
	}
	return b.String()
}
