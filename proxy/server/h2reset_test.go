package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/testkit/h2attack"
	"github.com/sluicelb/sluice/testkit/poll"
)

// cancelHoldBackend answers "/hold" only when the request is canceled (after
// telling held), everything else at once.
func cancelHoldBackend(t *testing.T, held chan<- struct{}) *backend {
	return newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "ok")
	})
}

// h2Client is an HTTP/2 client over connections it counts.
type h2Client struct {
	t     *testing.T
	tr    *http.Transport
	dials atomic.Int32
}

func newH2Client(t *testing.T, addr string, pool *x509.CertPool) *h2Client {
	c := &h2Client{t: t}
	cfg := &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"h2"}}
	c.tr = &http.Transport{ForceAttemptHTTP2: true, DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c.dials.Add(1)
		d := tls.Dialer{Config: cfg}
		return d.DialContext(ctx, "tcp", addr)
	}}
	t.Cleanup(c.tr.CloseIdleConnections)
	return c
}

func (c *h2Client) get(path string) error {
	req, _ := http.NewRequest(http.MethodGet, "https://demo.test"+path, nil)
	res, err := c.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err == nil && (res.StatusCode != 200 || res.ProtoMajor != 2) {
		err = errors.New(res.Proto + " " + res.Status)
	}
	return err
}

// cancelHeld sends "/hold" and cancels it once the backend holds it: the
// client resets the stream while the proxy's handler is forwarding it.
func (c *h2Client) cancelHeld(held <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://demo.test/hold", nil)
	done := make(chan error, 1)
	go func() {
		res, err := c.tr.RoundTrip(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	<-held
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		c.t.Fatalf("canceled request: %v, want context.Canceled", err)
	}
}

func guardOf(tf *TLSFront) *resetGuard { return tf.std.Handler.(*resetGuard) }

// A rapid-reset client (HEADERS then RST_STREAM, thousands of times) gets
// GOAWAY after the limit and its connection ends; a well-behaved client on
// another connection meanwhile is served on its one connection throughout.
func TestH2RapidResetConnectionIsClosed(t *testing.T) {
	held := make(chan struct{}, 1)
	b := cancelHoldBackend(t, held)
	snap := oneBackendSnapshot(b)
	tf, addr, pool := tlsProxyWith(t, FrontStd, snap, FrontOptions{H2MaxPrematureResets: 100})
	good := newH2Client(t, addr, pool)
	if err := good.get("/"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	goodDone := make(chan error, 1)
	var goodN atomic.Int32
	go func() {
		for {
			select {
			case <-stop:
				goodDone <- nil
				return
			default:
			}
			if err := good.get("/"); err != nil {
				goodDone <- err
				return
			}
			goodN.Add(1)
		}
	}()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "demo.test", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	res := h2attack.Run(conn, "demo.test", 5000, 20*time.Second)
	close(stop)
	if err := <-goodDone; err != nil {
		t.Fatalf("the well-behaved client failed during the attack: %v", err)
	}
	t.Logf("attack: %d pairs sent in %v (write error %v), %s; %d answers to the other client", res.Sent, res.Took, res.WriteErr, res.Ended, goodN.Load())
	if !res.GoAway() {
		t.Fatalf("the attacking connection ended %q, want GOAWAY", res.Ended)
	}
	g := guardOf(tf)
	if n := testutil.ToFloat64(g.s.metrics.h2ResetCloses); n != 1 {
		t.Fatalf("%v premature-reset closes, want 1", n)
	}
	if n := testutil.ToFloat64(g.s.metrics.h2Premature); n <= 100 {
		t.Fatalf("%v premature resets counted, want over the limit of 100", n)
	}
	if n := good.dials.Load(); n != 1 {
		t.Fatalf("the well-behaved client dialed %d times, want 1 (its connection untouched)", n)
	}
}

// A client that cancels some requests keeps its connection: cancels above
// half its streams but not above the limit, then above the limit but not
// above half.
func TestH2FewCancelsKeepTheConnection(t *testing.T) {
	held := make(chan struct{}, 1)
	b := cancelHoldBackend(t, held)
	snap := oneBackendSnapshot(b)
	tf, addr, pool := tlsProxyWith(t, FrontStd, snap, FrontOptions{H2MaxPrematureResets: 10})
	g := guardOf(tf)
	c := newH2Client(t, addr, pool)
	counted := func(want float64) {
		t.Helper()
		poll.EventuallyTrue(t, 10*time.Second, "canceled streams counted", func() bool { return testutil.ToFloat64(g.s.metrics.h2Premature) == want })
	}
	// 3 of 4 streams canceled (above half, not above 10).
	if err := c.get("/"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.cancelHeld(held)
	}
	counted(3)
	// 12 of 36 (above 10, not above half).
	for range 20 {
		if err := c.get("/"); err != nil {
			t.Fatal(err)
		}
	}
	for range 9 {
		c.cancelHeld(held)
	}
	counted(12)
	for range 3 {
		if err := c.get("/"); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(g.s.metrics.h2ResetCloses); n != 0 {
		t.Fatalf("%v premature-reset closes, want 0", n)
	}
	if n := c.dials.Load(); n != 1 {
		t.Fatalf("%d connections dialed, want 1 (never closed)", n)
	}
}

func TestH2PrematureResetRule(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := &h2Conn{start: t0}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for i := range 3 {
		if c.end(true, 3, at(time.Duration(i)*time.Millisecond)) {
			t.Fatalf("tripped at %d premature resets, limit 3", i+1)
		}
	}
	// The window is over: counting starts again.
	for i := range 3 {
		if c.end(true, 3, at(PrematureResetWindow+time.Duration(i)*time.Millisecond)) {
			t.Fatalf("tripped at %d premature resets of a new window, limit 3", i+1)
		}
	}
	for range 4 {
		c.end(false, 3, at(PrematureResetWindow+time.Second))
	}
	// 4 of 8: over the limit, not over half.
	if c.end(true, 3, at(PrematureResetWindow+time.Second)) {
		t.Fatal("tripped at 4 premature resets of 8 streams")
	}
	// 5 of 9: over both.
	if !c.end(true, 3, at(PrematureResetWindow+time.Second)) {
		t.Fatal("not tripped at 5 premature resets of 9 streams, limit 3")
	}
	if c.end(true, 3, at(PrematureResetWindow+time.Second)) || !c.isTripped() {
		t.Fatal("a tripped connection trips again, or is not tripped")
	}
}

func TestTLSFrontRejectsNegativeResetLimit(t *testing.T) {
	s, err := New(Options{Registry: balance.NewRegistry(balance.RegistryOptions{StickySecret: []byte("test-secret-0123456789")})})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := testCertificate(t)
	_, err = s.TLSFront(FrontStd, FrontOptions{Certificates: []tls.Certificate{cert}, H2MaxPrematureResets: -1})
	if err == nil || err.Error() != "server: H2MaxPrematureResets -1: want 0 (no limit) or a positive count" {
		t.Fatalf("err = %v", err)
	}
}
