// Package etcdtest starts a real, embedded, single-member etcd for tests and
// for the local dev fleet. Every module's tests use it, so the way etcd is
// started (ports, data dir, logging) is decided once.
package etcdtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/sluicelb/sluice/testkit/freeport"
)

// Server is a running embedded etcd.
type Server struct {
	Etcd      *embed.Etcd
	Endpoints []string
	Dir       string
	// CAFile is the CA of a TLS server (Options.TLSDir), else "".
	CAFile  string
	cfg     *embed.Config
	running bool
}

// Options tune Start. The zero value is fine for tests.
type Options struct {
	// Dir holds the data; empty means a fresh temporary directory.
	Dir string
	// ClientPort and PeerPort fix the ports (0 picks free ones).
	ClientPort, PeerPort int
	// LogLevel of etcd's own logger; default "fatal" (its shutdown logs errors that are not).
	LogLevel string
	// CompactionRetention ("" means none) e.g. "1" (hours) — tests compact by hand.
	AutoCompactionRetention string
	// AuthTokenTTL is the lifetime in seconds of an idle simple auth token
	// (0: etcd's 300).
	AuthTokenTTL uint
	// QuotaBackendBytes is the backend quota (0: etcd's 2 GiB); a small one
	// makes writes fail with "database space exceeded" (NOSPACE).
	QuotaBackendBytes int64
	// TLSDir, when set, makes the server serve TLS with a fresh CA written
	// there (see WriteCA; Server.CAFile).
	TLSDir string
}

// Start starts an embedded etcd and waits until it serves. With ports
// picked by the OS, a port taken by someone else between picking and binding
// is retried with fresh ports.
func Start(o Options) (*Server, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var s *Server
		s, err = start(o)
		if err == nil || (o.ClientPort != 0 && o.PeerPort != 0) || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
		if o.Dir != "" {
			// A failed start may have laid out a member with the old ports.
			_ = os.RemoveAll(o.Dir)
		}
	}
	return nil, err
}

func start(o Options) (*Server, error) {
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "sluice-etcd-*")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	cp, pp := o.ClientPort, o.PeerPort
	var err error
	if cp == 0 {
		if cp, err = freePort(); err != nil {
			return nil, err
		}
	}
	if pp == 0 {
		if pp, err = freePort(); err != nil {
			return nil, err
		}
	}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.Name = "sluice-test"
	scheme, caFile := "http", ""
	if o.TLSDir != "" {
		ca, cert, key, err := WriteCA(o.TLSDir)
		if err != nil {
			return nil, fmt.Errorf("etcd test CA: %w", err)
		}
		scheme, caFile = "https", ca
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: cert, KeyFile: key}
	}
	cfg.BcryptCost = 4 // bcrypt's minimum: passwords in tests need no strength, and -race makes the default cost slow
	if o.AuthTokenTTL > 0 {
		cfg.AuthTokenTTL = o.AuthTokenTTL
	}
	cu, _ := url.Parse(fmt.Sprintf("%s://127.0.0.1:%d", scheme, cp))
	pu, _ := url.Parse(fmt.Sprintf("http://127.0.0.1:%d", pp))
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, pu.String())
	cfg.LogLevel = o.LogLevel
	if cfg.LogLevel == "" {
		cfg.LogLevel = "fatal" // shutdown prints errors that mean nothing
	}
	cfg.AutoCompactionRetention = o.AutoCompactionRetention
	cfg.QuotaBackendBytes = o.QuotaBackendBytes
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	return &Server{Etcd: e, Endpoints: []string{cu.String()}, Dir: dir, CAFile: caFile, cfg: cfg, running: true}, nil
}

// Stop stops the server and keeps its data directory (Restart reuses it).
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if !s.running {
		return
	}
	s.running = false
	s.Etcd.Close()
	<-s.Etcd.Server.StopNotify()
}

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart() error {
	e, err := embed.StartEtcd(s.cfg)
	if err != nil {
		return fmt.Errorf("restart embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return fmt.Errorf("embedded etcd not ready after restart")
	}
	s.Etcd = e
	s.running = true
	return nil
}

// Client returns a client for the server; the caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: s.Endpoints, DialTimeout: 5 * time.Second})
}

// New starts a server for one test and stops it (and removes its data) at
// cleanup. It returns the server and a client closed at cleanup.
func New(t testing.TB) (*Server, *clientv3.Client) {
	t.Helper()
	s, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Client()
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Stop()
	})
	return s, c
}

// freePort is a port to bind now and again after a Restart, or in an
// external etcd: below the ephemeral range, where no outgoing connection
// takes it meanwhile (testkit/freeport).
func freePort() (int, error) { return freeport.Port() }

// ModRevision is key k's mod revision, 0 when the key is absent: what a
// test compares before and after a write that must not happen.
func ModRevision(t testing.TB, cli *clientv3.Client, k string) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return 0
	}
	return r.Kvs[0].ModRevision
}
