package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/route"
	"github.com/sluicelb/sluice/proxy/internal/logbuf"
)

// TestAccessLineMatchesJSONHandler: the access line Options.AccessLogWriter
// gets is byte for byte what slog.NewJSONHandler writes for the same
// request, over random field values — strings with quotes, backslashes,
// control characters, invalid UTF-8, U+2028/9, HTML characters; IPv4, IPv6,
// zoned and invalid client IPs; traced and untraced requests; times in
// other zones and with monotonic readings.
func TestAccessLineMatchesJSONHandler(t *testing.T) {
	rnd := rand.New(rand.NewPCG(20, 4))
	pieces := []string{"", "a", "/x/y", "é", "\"", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "<>&", "\xff", "\xe2\x80\xa8",
		"\u2029", "日本", "\U0001F600", "a b", "%20", "?q=1&r=2", "\xc3", "\u00e9\u0301"}
	str := func() string {
		var b strings.Builder
		for range rnd.IntN(5) {
			b.WriteString(pieces[rnd.IntN(len(pieces))])
		}
		return b.String()
	}
	ips := []netip.Addr{{}, netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("::1"), netip.MustParseAddr("2001:db8::7"),
		netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("fe80::1%e\"t\\h"), netip.MustParseAddr("::ffff:1.2.3.4")}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	var when time.Time
	for i := range 3000 {
		st := &reqState{rt: &runtime{version: rnd.Uint64N(1 << 40)}}
		if rnd.IntN(5) == 0 {
			st.rt = nil
		}
		st.res = route.Result{Product: str(), RuleName: str(), Cluster: str()}
		st.subcluster, st.instance, st.algorithm, st.reason, st.code = str(), str(), str(), str(), str()
		st.clientIP = ips[rnd.IntN(len(ips))]
		st.attempts, st.status = rnd.IntN(5), rnd.IntN(700)-50
		st.bytesOut = rnd.Int64N(1<<40) - 5
		st.upstreamTime, st.upstreamConnect = time.Duration(rnd.Int64N(1<<40)), time.Duration(rnd.Int64N(1<<30))
		switch rnd.IntN(3) {
		case 1:
			st.buf = make([]byte, rnd.IntN(100))
		case 2:
			st.stream = &streamBody{}
			st.stream.read.Store(rnd.Int64N(1 << 30))
		}
		if rnd.IntN(2) == 0 {
			var tid trace.TraceID
			for k := range tid {
				tid[k] = byte(rnd.IntN(256))
			}
			st.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{1}})
		}
		r := &http.Request{Method: str(), Host: str(), URL: &url.URL{Path: str(), RawQuery: str()}}
		prev := when
		when = time.Unix(rnd.Int64N(4e9), rnd.Int64N(1e9)).In(zones[rnd.IntN(len(zones))])
		switch rnd.IntN(4) {
		case 0:
			when = time.Now() // with a monotonic reading
		case 1: // the second of the line before (appendLineTime's cached text), maybe another zone
			when = time.Unix(prev.Unix(), [...]int64{0, 5e8, 120, rnd.Int64N(1e9)}[rnd.IntN(4)]).In(zones[rnd.IntN(len(zones))])
		}
		took := time.Duration(rnd.Int64N(1<<40) - 100)

		var want bytes.Buffer
		if err := slog.NewJSONHandler(&want, nil).Handle(context.Background(), st.accessRecord(r, when, took)); err != nil {
			t.Fatal(err)
		}
		got := st.appendAccess(nil, r, when, took)
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("line %d:\n got %s\nwant %s", i, got, want.Bytes())
		}
	}
}

// TestAccessLogWriterLines: through a proxy, Options.AccessLogWriter gets
// one line per request with the request's fields; setting it with
// Options.AccessLog is refused, naming both.
func TestAccessLogWriterLines(t *testing.T) {
	be := newBackend(t, "b1", nil)
	var buf syncBuffer
	p := newProxy(t, testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(be.addr, 1)}},
		map[string]int{"SC1": 100}, nil)), proxyOpts{opts: Options{AccessLogWriter: &buf}})
	c := client(t)
	for _, path := range []string{"/a?x=1", "/b"} {
		if res, _ := get(t, c, p.url+path, nil); res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
	}
	lines := buf.lines(t)
	if len(lines) != 2 {
		t.Fatalf("%d access lines, want 2", len(lines))
	}
	for i, want := range []map[string]any{
		{"msg": "request", "level": "INFO", "path": "/a", "query": "x=1", "status": 200.0, "version": 3.0, "cluster": "main", "subcluster": "SC1", "attempts": 1.0, "instance": be.addr.String(), "client_ip": "127.0.0.1"},
		{"path": "/b", "query": "", "status": 200.0, "trace_id": ""},
	} {
		for k, v := range want {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (line %v)", i, k, lines[i][k], v, lines[i])
			}
		}
	}
	_, err := New(Options{Registry: p.s.reg, AccessLog: slog.Default(), AccessLogWriter: &buf})
	if err == nil || !strings.Contains(err.Error(), "Options.AccessLog and Options.AccessLogWriter") {
		t.Fatalf("both access logs: %v, want an error naming both", err)
	}
}

// TestTraceCarriersAgreeWithHeaderCarrier: the request carrier reads what
// propagation.HeaderCarrier reads, for the keys propagators ask for and any
// other; traceHeaderKey is http.CanonicalHeaderKey.
func TestTraceCarriersAgreeWithHeaderCarrier(t *testing.T) {
	h := http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "second"},
		"Tracestate": {"a=1"}, "Baggage": {"k=v"}, "X-Other": {"o"}}
	for _, k := range []string{"traceparent", "tracestate", "baggage", "x-other", "X-Other", "Traceparent", "missing", ""} {
		if got, want := requestCarrier(h).Get(k), propagation.HeaderCarrier(h).Get(k); got != want {
			t.Errorf("Get(%q) = %q, HeaderCarrier's %q", k, got, want)
		}
		if got, want := traceHeaderKey(k), http.CanonicalHeaderKey(k); got != want {
			t.Errorf("traceHeaderKey(%q) = %q, want %q", k, got, want)
		}
	}
}

// BenchmarkAccessLine is one access line to io.Discard: slog.JSONHandler
// (Options.AccessLog) against the server's own encoder
// (Options.AccessLogWriter), for a typical proxied GET.
func BenchmarkAccessLine(b *testing.B) {
	st := &reqState{rt: &runtime{version: 42}, res: route.Result{Product: "demo", RuleName: "all", Cluster: "main"},
		subcluster: "SC1", instance: "10.0.0.7:8080", algorithm: "wrr", reason: "hash", attempts: 1, status: 200,
		clientIP: netip.MustParseAddr("10.1.2.3"), bytesOut: 100, upstreamTime: 402113,
		reuse: true} // the fast path's state
	r := &http.Request{Method: "GET", Host: "demo.test", URL: &url.URL{Path: "/index.html", RawQuery: "q=1"}}
	b.Run("slog", func(b *testing.B) {
		h := slog.NewJSONHandler(io.Discard, nil)
		b.ReportAllocs()
		cpu0 := processCPU(b)
		for b.Loop() {
			_ = h.Handle(context.Background(), st.accessRecord(r, time.Now(), 812345))
		}
		b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	})
	for _, v := range []struct {
		name string
		w    io.Writer
	}{{"accessline", io.Discard}, {"logbuf", logbuf.New(io.Discard, 64<<10)}} {
		// logbuf: as lbproxy writes it (--access-log-buffer 65536), to io.Discard
		b.Run(v.name, func(b *testing.B) {
			w := newAccessWriter(v.w)
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				w.write(st, r, time.Now(), 812345)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestAppendJSONBodyEveryPosition: appendJSONBody escapes as slog's JSON
// handler does whatever the string's length and wherever in it the byte to
// escape is — in either eight-byte word of a long string, in the bytes
// after the last word, or nowhere (then the words pass whole).
func TestAppendJSONBodyEveryPosition(t *testing.T) {
	var out bytes.Buffer
	h := slog.NewJSONHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key != "k" {
			return slog.Attr{}
		}
		return a
	}})
	specials := []string{"\"", "\\", "\n", "\x00", "\x1f", "\x7f", "\x80", "\xff", "é", "\u2028", " ", "~", "!", "#", "[", "]", "!\x21"}
	for n := range 26 {
		plain := strings.Repeat("a", n)
		cases := []string{plain}
		for pos := 0; pos <= n; pos++ {
			for _, c := range specials {
				cases = append(cases, plain[:pos]+c+plain[pos:])
			}
		}
		for _, s := range cases {
			out.Reset()
			rec := slog.NewRecord(time.Time{}, slog.LevelInfo, "", 0)
			rec.AddAttrs(slog.String("k", s))
			if err := h.Handle(context.Background(), rec); err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSuffix(strings.TrimPrefix(out.String(), `{"k":`), "}\n")
			if got := string(appendJSONString([]byte("x"), s)); got != "x"+want {
				t.Fatalf("%q: got %s, want %s", s, got[1:], want)
			}
		}
	}
}

// TestAppendIntMatchesStrconv: the line's numbers are strconv's.
func TestAppendIntMatchesStrconv(t *testing.T) {
	vals := []int64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345, -1, -9, -10, -99, -100, -12345,
		math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1, 1e18, -1e18}
	for p := int64(1); p < math.MaxInt64/10; p *= 10 {
		vals = append(vals, p-1, p, p+1, -p, -p+1)
	}
	rnd := rand.New(rand.NewPCG(3, 5))
	for range 5000 {
		vals = append(vals, rnd.Int64()>>rnd.IntN(64), -(rnd.Int64() >> rnd.IntN(64)))
	}
	for _, v := range vals {
		if got, want := string(appendInt([]byte("x"), v)), "x"+strconv.FormatInt(v, 10); got != want {
			t.Fatalf("appendInt(%d) = %s, want %s", v, got, want)
		}
		u := uint64(v)
		if got, want := string(appendUint([]byte("x"), u)), "x"+strconv.FormatUint(u, 10); got != want {
			t.Fatalf("appendUint(%d) = %s, want %s", u, got, want)
		}
	}
}

// TestAccessWriterThroughLogbufConcurrently: with a logbuf.Writer the
// access writer takes no lock of its own (the buffer serialises its
// writes): lines written at once from many goroutines still arrive whole,
// each once.
func TestAccessWriterThroughLogbufConcurrently(t *testing.T) {
	var out syncBuffer
	lb := logbuf.New(&out, 4096)
	w := newAccessWriter(lb)
	if !w.locked {
		t.Fatal("a logbuf.Writer: want the access writer to leave the locking to it")
	}
	const goroutines, each = 8, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				st := &reqState{res: route.Result{Product: "p"}, attempts: g, status: 200 + i%3, reuse: i%2 == 0}
				r := &http.Request{Method: "GET", Host: "h", URL: &url.URL{Path: "/" + strconv.Itoa(i)}}
				w.write(st, r, time.Unix(1, 0), time.Duration(g*each+i))
			}
		}()
	}
	wg.Wait()
	if err := lb.Flush(); err != nil {
		t.Fatal(err)
	}
	seen := map[float64]bool{}
	for _, m := range out.lines(t) { // each line whole: valid JSON
		seen[m["duration"].(float64)] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d distinct lines, want %d", len(seen), goroutines*each)
	}
}
