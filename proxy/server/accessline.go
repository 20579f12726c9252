package server

import (
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluicelb/sluice/proxy/internal/logbuf"
)

// The access line (Options.AccessLogWriter) is written by appendAccess
// rather than by slog.JSONHandler: the same bytes, without a slog.Record
// (whose attributes past the fifth go to a slice allocated per line) or the
// handler's per-attribute dispatch, and with the client IP and trace id
// formatted straight into the line instead of into strings of their own. accessRecord is the slog form
// of the same line (Options.AccessLog); TestAccessLineMatchesJSONHandler
// holds the two to the same bytes.

// accessWriter writes whole lines to w, one Write per line, serialised as
// slog.JSONHandler serialises its writes — by w itself when it is a
// logbuf.Writer (lbproxy's --access-log-buffer), which takes each Write
// whole under its own lock.
type accessWriter struct {
	mu     sync.Mutex
	w      io.Writer
	locked bool // w serialises its writes itself
}

func newAccessWriter(w io.Writer) *accessWriter {
	_, locked := w.(*logbuf.Writer)
	return &accessWriter{w: w, locked: locked}
}

// accessBufs are the lines being formatted (about 600 bytes each). With
// one P the pool hands out one buffer, hot in the cache: a buffer of each
// request state's own (64 of them at 64 connections) measured slower in
// bench/run.sh for fewer instructions (docs/BENCHMARKS.md, s10-full).
var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (a *accessWriter) write(st *reqState, r *http.Request, t time.Time, took time.Duration) {
	bp := accessBufs.Get().(*[]byte)
	b := st.appendAccess((*bp)[:0], r, t, took)
	a.put(b)
	*bp = b
	accessBufs.Put(bp)
}

func (a *accessWriter) put(b []byte) {
	if a.locked {
		_, _ = a.w.Write(b)
		return
	}
	a.mu.Lock()
	_, _ = a.w.Write(b)
	a.mu.Unlock()
}

// appendAccess appends the request's JSON access line, newline included,
// byte for byte what slog.NewJSONHandler(w, nil) writes for accessRecord.
// A string field's quotes go out with the key before and after it.
func (st *reqState) appendAccess(b []byte, r *http.Request, t time.Time, took time.Duration) []byte {
	b = append(b, `{"time":"`...)
	b = appendLineTime(b, t)
	b = append(b, `","level":"INFO","msg":"request","method":"`...)
	b = appendJSONBody(b, r.Method)
	b = append(b, `","host":"`...)
	b = appendJSONBody(b, r.Host)
	b = append(b, `","path":"`...)
	b = appendJSONBody(b, r.URL.Path)
	b = append(b, `","client_ip":`...)
	if st.clientIP.IsValid() && st.clientIP.Zone() == "" {
		// Digits, dots, colons and hex: nothing to escape.
		b = append(b, '"')
		b = st.clientIP.AppendTo(b)
		b = append(b, '"')
	} else {
		b = appendJSONString(b, st.clientIP.String())
	}
	b = append(b, `,"version":`...)
	b = appendUint(b, st.version())
	b = append(b, `,"product":"`...)
	b = appendJSONBody(b, st.res.Product)
	b = append(b, `","rule":"`...)
	b = appendJSONBody(b, st.res.RuleName)
	b = append(b, `","cluster":"`...)
	b = appendJSONBody(b, st.res.Cluster)
	b = append(b, `","subcluster":"`...)
	b = appendJSONBody(b, st.subcluster)
	b = append(b, `","instance":"`...)
	b = appendJSONBody(b, st.instance)
	b = append(b, `","algorithm":"`...)
	b = appendJSONBody(b, st.algorithm)
	b = append(b, `","pick_reason":"`...)
	b = appendJSONBody(b, st.reason)
	b = append(b, `","attempts":`...)
	b = appendInt(b, int64(st.attempts))
	b = append(b, `,"status":`...)
	b = appendInt(b, int64(st.status))
	b = append(b, `,"error_code":"`...)
	b = appendJSONBody(b, st.code)
	b = append(b, `","duration":`...)
	b = appendInt(b, int64(took))
	b = append(b, `,"query":"`...)
	b = appendJSONBody(b, r.URL.RawQuery)
	b = append(b, `","bytes_in":`...)
	b = appendInt(b, st.bytesIn())
	b = append(b, `,"bytes_out":`...)
	b = appendInt(b, st.bytesOut)
	b = append(b, `,"upstream_header_time":`...)
	b = appendInt(b, int64(st.upstreamTime))
	b = append(b, `,"upstream_connect_time":`...)
	b = appendInt(b, int64(st.upstreamConnect))
	b = append(b, `,"trace_id":"`...)
	switch {
	case st.traceparent != "": // "00-" trace id "-" …, already in hex
		b = append(b, st.traceparent[3:35]...)
	case st.sc.HasTraceID():
		id := st.sc.TraceID()
		b = hex.AppendEncode(b, id[:])
	}
	return append(b, "\"}\n"...)
}

// lineSecond is the text of one second of line times, in one location:
// what time.RFC3339Nano writes before the fraction, and the zone after it.
type lineSecond struct {
	unix       int64
	loc        *time.Location
	text, zone []byte
}

// lastSecond is the second of the latest line: the lines of one second
// format only their fraction.
var lastSecond atomic.Pointer[lineSecond]

// appendLineTime appends t as t.Round(0).AppendFormat(b, time.RFC3339Nano)
// does (slog's time), the date and clock of its second formatted once.
func appendLineTime(b []byte, t time.Time) []byte {
	c := lastSecond.Load()
	if c == nil || c.unix != t.Unix() || c.loc != t.Location() {
		// The second's year is checked once, here: the cached text is of
		// four-digit years only.
		if y := t.Year(); y < 0 || y > 9999 {
			return t.Round(0).AppendFormat(b, time.RFC3339Nano)
		}
		c = &lineSecond{unix: t.Unix(), loc: t.Location(),
			text: t.AppendFormat(nil, "2006-01-02T15:04:05"), zone: t.AppendFormat(nil, "Z07:00")}
		lastSecond.Store(c)
	}
	b = append(b, c.text...)
	if ns := uint32(t.Nanosecond()); ns != 0 { // ".999999999": no trailing zeros
		var d [10]byte
		d[0], d[9] = '.', byte('0'+ns%10)
		ns /= 10
		for i := 7; i > 0; i -= 2 {
			p := decPairs[ns%100]
			d[i], d[i+1] = p[0], p[1]
			ns /= 100
		}
		n := len(d)
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return append(b, c.zone...)
}

// accessRecord is the request's access line as a slog record.
func (st *reqState) accessRecord(r *http.Request, t time.Time, took time.Duration) slog.Record {
	// A record handed to the handler directly: Logger.LogAttrs would also
	// walk the stack for the caller's PC (runtime.Callers, ~0.6 µs), which
	// an access line never prints.
	rec := slog.NewRecord(t, slog.LevelInfo, "request", 0)
	rec.AddAttrs(
		slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
		slog.String("client_ip", st.clientIP.String()),
		slog.Uint64("version", st.version()),
		slog.String("product", st.res.Product), slog.String("rule", st.res.RuleName),
		slog.String("cluster", st.res.Cluster), slog.String("subcluster", st.subcluster),
		slog.String("instance", st.instance), slog.String("algorithm", st.algorithm),
		slog.String("pick_reason", st.reason), slog.Int("attempts", st.attempts),
		slog.Int("status", st.status), slog.String("error_code", st.code),
		slog.Duration("duration", took),
		slog.String("query", r.URL.RawQuery), slog.Int64("bytes_in", st.bytesIn()),
		slog.Int64("bytes_out", st.bytesOut), slog.Duration("upstream_header_time", st.upstreamTime),
		slog.Duration("upstream_connect_time", st.upstreamConnect),
		slog.String("trace_id", st.traceID()))
	return rec
}

// version is the applied snapshot's version, 0 before the first.
func (st *reqState) version() uint64 {
	if st.rt != nil {
		return st.rt.version
	}
	return 0
}

// appendJSONString appends s as a JSON string the way log/slog's JSON
// handler escapes it (its appendEscapedJSONString, Go 1.26): ", \ and
// control characters escaped (\n, \r, \t by name), invalid UTF-8 as
// \ufffd, U+2028 and U+2029 escaped; <, > and & kept.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendJSONBody(b, s)
	return append(b, '"')
}

// jsonPlain are the bytes appendJSONString copies as they are: ASCII from
// the space up, less " and \.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONBody appends s escaped as appendJSONString does, without the
// quotes: at once when nothing in it needs escaping (the usual field). The
// scan takes eight bytes at a time: a word is plain when none of its bytes
// is at or above 0x80, below 0x20, '"' or '\\' — each test the exact "has
// a byte that is …" of the word (a false positive would only stop the word
// loop early, and the byte loop decides).
func appendJSONBody(b []byte, s string) []byte {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		q, e := x^('"'*lo), x^('\\'*lo)
		if (x|(x-0x20*lo)|(q-lo)&^q|(e-lo)&^e)&hi != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			return appendJSONEscaped(b, s, i)
		}
	}
	return append(b, s...)
}

// appendJSONEscaped appends s, escaped, when s[i] is the first byte of it
// not in jsonPlain.
func appendJSONEscaped(b []byte, s string, i int) []byte {
	start := 0
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

const hexDigits = "0123456789abcdef"

// appendInt appends v in decimal, as strconv.AppendInt(b, v, 10) does.
func appendInt(b []byte, v int64) []byte {
	if uint64(v) < 10 { // attempts, a body of none: one digit
		return append(b, byte('0'+v))
	}
	if v < 0 {
		return appendUint(append(b, '-'), -uint64(v))
	}
	return appendUint(b, uint64(v))
}

// appendUint appends u in decimal, as strconv.AppendUint(b, u, 10) does,
// two digits at a time.
func appendUint(b []byte, u uint64) []byte {
	var d [20]byte
	i := len(d)
	for u >= 100 {
		p := decPairs[u%100]
		i -= 2
		d[i], d[i+1] = p[0], p[1]
		u /= 100
	}
	if u >= 10 {
		p := decPairs[u]
		i -= 2
		d[i], d[i+1] = p[0], p[1]
	} else {
		i--
		d[i] = byte('0' + u)
	}
	return append(b, d[i:]...)
}

// decPairs are the two decimal digits of 0 to 99.
var decPairs = func() (t [100][2]byte) {
	for i := range t {
		t[i] = [2]byte{byte('0' + i/10), byte('0' + i%10)}
	}
	return t
}()
