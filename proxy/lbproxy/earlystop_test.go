package lbproxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/proxy/server"
)

// TestStopRightAfterStart: a proxy stopped as soon as it started — ctx
// cancelled from Started, before the servers' Serve goroutines had a chance
// to run — returns from Run, for every front on the plain and the TLS
// listener. Run starts each Serve in a goroutine and shuts every front down
// at once: a front whose Serve, called after its Shutdown, serves on (as
// fasthttp's did, CI's "Run did not return after cancel") hangs Run. Many
// rounds each: the bad order is the likely one, not a certain one.
func TestStopRightAfterStart(t *testing.T) {
	path, _ := stateFile(t)
	dir := t.TempDir()
	cert, key, _ := selfSigned(t, dir, "a.test")
	const rounds = 25
	for _, kinds := range [][2]string{
		{server.FrontFastHTTP, server.FrontFastHTTP},
		{server.FrontStd, server.FrontStd},
		{server.FrontFastHTTP, server.FrontStd},
		{server.FrontStd, server.FrontFastHTTP},
	} {
		for i := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			started := false
			cfg := Config{ConfigFile: path, ProxyCluster: "BFE1", ID: "p1", TraceExporter: "none",
				Listen: "127.0.0.1:0", ListenTLS: "127.0.0.1:0", Admin: "127.0.0.1:0",
				FrontKind: kinds[0], TLSFrontKind: kinds[1], Certs: []CertPair{{Cert: cert, Key: key}},
				Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
				Started: func(Addrs) { started = true; cancel() }, // Run reads ctx.Done right after
			}
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg) }()
			name := fmt.Sprintf("front %s, TLS front %s, round %d", kinds[0], kinds[1], i+1)
			select {
			case err := <-done:
				if err != nil || !started {
					t.Fatalf("%s: Run returned %v (started %v), want nil after a start", name, err, started)
				}
			case <-time.After(30 * time.Second): // a safety net: Run takes milliseconds
				cancel()
				t.Fatalf("%s: Run did not return after cancel", name)
			}
			cancel()
		}
	}
}

// TestFailedStartLeavesNothingRunning: a start-up that fails at its last
// step — the TLS front refuses its options, after the plain front was made —
// returns with no server started and every background goroutine ended, and
// leaves the caller's listener unserved (Run closes only the listeners it
// opened: a server started on the caller's would serve on after Run
// returned).
func TestFailedStartLeavesNothingRunning(t *testing.T) {
	path, _ := stateFile(t)
	cert, key, _ := selfSigned(t, t.TempDir(), "a.test")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := goleak.IgnoreCurrent()
	err = Run(context.Background(), Config{ConfigFile: path, ProxyCluster: "BFE1", ID: "p1", TraceExporter: "none",
		Listener: l, ListenTLS: "127.0.0.1:0", Admin: "127.0.0.1:0", Certs: []CertPair{{Cert: cert, Key: key}},
		Front:  server.FrontOptions{H2Server: "bogus"},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), `H2Server "bogus"`) {
		t.Fatalf("Run: %v, want the TLS front's H2Server error", err)
	}
	goleak.VerifyNone(t, before, // retries while goroutines end; a server on l would not
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"))
}
