package probe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/statusmatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func addrOf(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	s = strings.TrimPrefix(strings.TrimPrefix(s, "http://"), "https://")
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) netip.AddrPort {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := addrOf(t, l.Addr().String())
	l.Close()
	return a
}

func TestHTTPStatusAndBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			w.Write([]byte("all ok"))
		case "/503":
			w.WriteHeader(503)
		case "/302":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/host":
			w.Write([]byte("host=" + r.Host))
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	a := addrOf(t, srv.URL)
	cases := []struct {
		name    string
		target  Target
		wantErr string
		is      error
	}{
		{"default path 2xx", Target{Addr: a}, "", nil},
		{"body match", Target{Addr: a, Body: "ok"}, "", nil},
		{"body mismatch", Target{Addr: a, Body: "ready"}, `body does not contain "ready"`, ErrBody},
		{"503 not 2xx", Target{Addr: a, Path: "/503"}, "status 503 not in 2xx", ErrStatus},
		{"503 expected", Target{Addr: a, Path: "/503", Expect: statusmatch.MustParse("503")}, "", nil},
		{"302 not followed", Target{Addr: a, Path: "/302"}, "status 302 not in 2xx", ErrStatus},
		{"302 in 2xx|30x", Target{Addr: a, Path: "/302", Expect: statusmatch.MustParse("2xx|30x")}, "", nil},
		{"404 in range", Target{Addr: a, Path: "/nope", Expect: statusmatch.MustParse("400-404")}, "", nil},
		{"host header", Target{Addr: a, Path: "/host", Host: "svc.internal", Body: "host=svc.internal"}, "", nil},
		{"host defaults to addr", Target{Addr: a, Path: "/host", Body: "host=" + a.String()}, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(context.Background(), c.target)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("want healthy, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("want error containing %q, got %v", c.wantErr, err)
			}
			if !errors.Is(err, c.is) {
				t.Fatalf("error %v is not %v", err, c.is)
			}
		})
	}
}

func TestBodyBeyondLimitIsNotSeen(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("x", MaxBody)))
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	err := Check(context.Background(), Target{Addr: addrOf(t, srv.URL), Body: "ok"})
	if !errors.Is(err, ErrBody) {
		t.Fatalf("want ErrBody (only %d bytes read), got %v", MaxBody, err)
	}
}

func TestDialRefused(t *testing.T) {
	a := closedAddr(t)
	for _, scheme := range []string{"http", "https", "tcp", "tls"} {
		err := Check(context.Background(), Target{Scheme: scheme, Addr: a})
		if !errors.Is(err, ErrDial) {
			t.Fatalf("%s: want ErrDial, got %v", scheme, err)
		}
		want := "dial " + a.String() + ": connection refused"
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: want %q in %q", scheme, want, err)
		}
	}
}

func TestTimeouts(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)

	// A TCP listener that never completes a TLS handshake.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		silent.Close()
		for c := range accepted {
			c.Close()
		}
	}()

	cases := []Target{
		{Scheme: "http", Addr: addrOf(t, hung.URL), Timeout: 150 * time.Millisecond},
		{Scheme: "tls", Addr: addrOf(t, silent.Addr().String()), Timeout: 150 * time.Millisecond},
		{Scheme: "https", Addr: addrOf(t, silent.Addr().String()), Timeout: 150 * time.Millisecond},
	}
	for _, tg := range cases {
		start := time.Now()
		err := Check(context.Background(), tg)
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "timeout after 150ms") {
			t.Fatalf("%s: want timeout after 150ms, got %v", tg.Scheme, err)
		}
		if took > 5*time.Second {
			t.Fatalf("%s: Check blocked %s past its 150ms timeout", tg.Scheme, took)
		}
	}
}

func TestTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() { l.Close(); <-done }()
	if err := Check(context.Background(), Target{Scheme: "tcp", Addr: addrOf(t, l.Addr().String())}); err != nil {
		t.Fatalf("tcp: %v", err)
	}
}

// pki is a throwaway CA with a server and a client certificate.
type pki struct {
	pool       *x509.CertPool
	server     tls.Certificate
	client     tls.Certificate
	clientPool *x509.CertPool
}

func newPKI(t *testing.T) pki {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string) tls.Certificate {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: dns, KeyUsage: x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pki{
		pool:       pool,
		server:     leaf(2, "backend", x509.ExtKeyUsageServerAuth, []string{"backend.test"}),
		client:     leaf(3, "agent", x509.ExtKeyUsageClientAuth, nil),
		clientPool: pool,
	}
}

func TestHTTPSWithCASNIAndClientCert(t *testing.T) {
	p := newPKI(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte("sni=" + r.TLS.ServerName))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.clientPool}
	srv.StartTLS()
	defer srv.Close()
	a := addrOf(t, srv.URL)
	// The probes' 1 s default is not what this test checks (TestTimeouts
	// does): the first check against the system roots loads them, which
	// took more than 1 s under -race on a loaded machine ("want unknown
	// authority, got probe timeout: timeout after 1s").
	const slack = 30 * time.Second

	good := &tls.Config{RootCAs: p.pool, Certificates: []tls.Certificate{p.client}}
	if err := Check(context.Background(), Target{Scheme: "https", Addr: a, Host: "backend.test", TLS: good, Path: "/", Body: "sni=backend.test", Timeout: slack}); err != nil {
		t.Fatalf("https with CA, SNI and client cert: %v", err)
	}
	// Without SNI the certificate (backend.test) does not match 127.0.0.1.
	if err := Check(context.Background(), Target{Scheme: "https", Addr: a, TLS: good, Path: "/", Timeout: slack}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("want certificate error without SNI, got %v", err)
	}
	// System roots do not know our CA.
	if err := Check(context.Background(), Target{Scheme: "https", Addr: a, Host: "backend.test", Path: "/", Timeout: slack}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("want unknown authority, got %v", err)
	}
	// Without a client certificate the server refuses the handshake.
	noClient := &tls.Config{RootCAs: p.pool}
	if err := Check(context.Background(), Target{Scheme: "https", Addr: a, Host: "backend.test", TLS: noClient, Path: "/", Timeout: slack}); err == nil {
		t.Fatal("want failure without a client certificate")
	}
}

func TestTLSHandshake(t *testing.T) {
	p := newPKI(t)
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{p.server}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				c.(*tls.Conn).Handshake()
				c.Close()
			}()
		}
	}()
	defer func() { l.Close(); <-done }()
	a := addrOf(t, l.Addr().String())
	if err := Check(context.Background(), Target{Scheme: "tls", Addr: a, Host: "backend.test", TLS: &tls.Config{RootCAs: p.pool}}); err != nil {
		t.Fatalf("tls: %v", err)
	}
	err = Check(context.Background(), Target{Scheme: "tls", Addr: a, Host: "other.test", TLS: &tls.Config{RootCAs: p.pool}})
	if err == nil || !strings.Contains(err.Error(), "tls handshake") {
		t.Fatalf("want handshake error for wrong name, got %v", err)
	}
	// InsecureSkipVerify accepts any certificate and name.
	if err := Check(context.Background(), Target{Scheme: "tls", Addr: a, TLS: &tls.Config{InsecureSkipVerify: true}}); err != nil {
		t.Fatalf("tls insecure: %v", err)
	}
}

func TestBadTarget(t *testing.T) {
	if err := Check(context.Background(), Target{Scheme: "udp", Addr: netip.MustParseAddrPort("127.0.0.1:1")}); err == nil || !strings.Contains(err.Error(), `scheme "udp"`) {
		t.Fatalf("got %v", err)
	}
	if err := Check(context.Background(), Target{}); err == nil || !strings.Contains(err.Error(), "not ip:port") {
		t.Fatalf("got %v", err)
	}
}

func TestFromPolicy(t *testing.T) {
	a := netip.MustParseAddrPort("10.0.0.1:8080")
	tg, err := FromPolicy(a, config.Probe{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Scheme != "http" || tg.Path != "/healthz" || tg.Expect.String() != "2xx" || tg.TLS != nil || tg.Addr != a {
		t.Fatalf("defaults: %+v", tg)
	}
	tg, err = FromPolicy(a, config.Probe{Scheme: "https", Path: "/ready", Host: "svc", Status: "200|204", Body: "up", InsecureSkipVerify: true}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.Expect.Match(204) || tg.Expect.Match(201) || tg.Host != "svc" || tg.Body != "up" || tg.Timeout != 2*time.Second || tg.TLS == nil || !tg.TLS.InsecureSkipVerify {
		t.Fatalf("https policy: %+v", tg)
	}
	bad := []struct {
		p    config.Probe
		want string
	}{
		{config.Probe{Scheme: "ftp"}, `probe.scheme: "ftp"`},
		{config.Probe{Status: "7xx"}, `probe.status: status "7xx"`},
		{config.Probe{Path: "healthz"}, `probe.path: "healthz" must start with "/"`},
	}
	for _, b := range bad {
		if _, err := FromPolicy(a, b.p, 0); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Fatalf("%+v: want %q, got %v", b.p, b.want, err)
		}
	}
	if _, err := FromPolicy(netip.AddrPort{}, config.Probe{}, 0); err == nil {
		t.Fatal("want error for invalid address")
	}
}

func mustAddr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// CheckPolicy is FromPolicy then Check: a policy error is returned without
// dialling, and the policy's status and body are what the backend is judged by.
func TestCheckPolicy(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "warming")
	}))
	defer srv.Close()
	a := mustAddr(srv.Listener.Addr().String())
	ctx := context.Background()
	if err := CheckPolicy(ctx, a, config.Probe{Path: "/ready", Status: "202"}, 0); err != nil {
		t.Fatalf("202 on /ready: %v", err)
	}
	if err := CheckPolicy(ctx, a, config.Probe{Path: "/ready", Status: "202", Body: "ready"}, 0); !errors.Is(err, ErrBody) {
		t.Fatalf("body mismatch: got %v, want ErrBody", err)
	}
	if err := CheckPolicy(ctx, a, config.Probe{}, 0); !errors.Is(err, ErrStatus) {
		t.Fatalf("404 on the default /healthz: got %v, want ErrStatus", err)
	}
	if err := CheckPolicy(ctx, a, config.Probe{Scheme: "udp"}, 0); err == nil || !strings.Contains(err.Error(), `probe.scheme: "udp"`) {
		t.Fatalf("bad scheme: %v", err)
	}
}
