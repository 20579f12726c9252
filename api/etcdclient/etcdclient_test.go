package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestCheckEndpoints(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:2379", "http://127.0.0.1:2379", "https://etcd.example:2379/", "[::1]:2379", "unix:///run/etcd.sock"} {
		if err := CheckEndpoints([]string{ok}); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for ep, want := range map[string]string{
		"bogus:::1":            `etcd endpoint "bogus:::1": want host:port or http(s)://host:port (too many colons in address)`,
		"127.0.0.1":            `etcd endpoint "127.0.0.1": want host:port or http(s)://host:port (missing port in address)`,
		"ftp://h:1":            `etcd endpoint "ftp://h:1": scheme "ftp": want http, https, unix or unixs`,
		"http://h:0":           `etcd endpoint "http://h:0": port "0": want 1-65535`,
		"http://h:2379/sluice": `etcd endpoint "http://h:2379/sluice": path "/sluice": an endpoint has no path`,
		":2379":                `etcd endpoint ":2379": no host`,
	} {
		if err := CheckEndpoints([]string{ep}); err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", ep, err, want)
		}
	}
	if _, err := New(Config{Endpoints: []string{"bogus:::1"}}); err == nil {
		t.Error("New accepted a malformed endpoint")
	}
	if _, err := New(Config{Endpoints: []string{"127.0.0.1:2379"}, Username: "u"}); err == nil {
		t.Error("New accepted a user without a password")
	}
	if _, err := New(Config{Endpoints: []string{"127.0.0.1:2379"}, CACert: "/nonexistent/ca.pem"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Errorf("unreadable CA: %v", err)
	}
}

func TestExplain(t *testing.T) {
	eps := []string{"127.0.0.1:2379"}
	refused := status.Error(codes.DeadlineExceeded, `latest balancer error: connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.7:2379: connect: connection refused"`)
	for _, tc := range []struct {
		err, known error
		key        string
		want       string
		class      Class
	}{
		{rpctypes.ErrGRPCAuthFailed, nil, "", "etcd 127.0.0.1:2379: authentication failed (wrong user or password) for user sluice", ClassAuth},
		{rpctypes.ErrPermissionDenied, nil, "/sluice/status/BFE1/p1", "etcd 127.0.0.1:2379: permission denied on /sluice/status/BFE1/p1 for user sluice", ClassPermission},
		{rpctypes.ErrGRPCNoSpace, nil, "", "etcd 127.0.0.1:2379: database space exceeded (the etcd quota is reached: compact and defragment etcd)", ClassNoSpace},
		{refused, nil, "", "etcd 10.0.0.7:2379: unreachable (connection refused)", ClassUnreachable},
		{context.DeadlineExceeded, refused, "", "etcd 10.0.0.7:2379: unreachable (connection refused)", ClassUnreachable},
		{context.DeadlineExceeded, nil, "", "etcd 127.0.0.1:2379: no answer in time (context deadline exceeded)", ClassTimeout},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp: lookup etcd.invalid on 127.0.0.53:53: no such host"`), nil, "", "etcd 127.0.0.1:2379: unreachable (DNS: etcd.invalid: no such host)", ClassDNS},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), nil, "", "etcd 127.0.0.1:2379: TLS: x509: certificate signed by unknown authority", ClassTLS},
	} {
		got := explain(tc.err, tc.known, eps, "sluice", tc.key)
		if got == nil || got.Error() != tc.want || ClassOf(got) != tc.class {
			t.Errorf("explain(%v):\n got %v (%s)\nwant %s (%s)", tc.err, got, ClassOf(got), tc.want, tc.class)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("explain(%v) does not wrap the error", tc.err)
		}
	}
	if explain(nil, nil, eps, "", "") != nil {
		t.Error("explain(nil) != nil")
	}
	if err := explain(context.Canceled, nil, eps, "", ""); err != context.Canceled {
		t.Errorf("a cancelled call: %v", err)
	}
	wrapped := fmt.Errorf("read snapshot pointers: %w", context.DeadlineExceeded)
	want := "read snapshot pointers: etcd 10.0.0.7:2379: unreachable (connection refused)"
	if got := explain(wrapped, refused, eps, "", ""); got.Error() != want || ClassOf(got) != ClassUnreachable {
		t.Errorf("wrapped:\n got %v\nwant %s", got, want)
	}
	if mine := errors.New("row BFE1: SC3 is not a sub-cluster"); explain(mine, refused, eps, "", "") != mine || ClassOf(mine) != "" {
		t.Error("an error that is not etcd's was reworded")
	}
	if ClassOf(fmt.Errorf("read pointers: %w", rpctypes.ErrGRPCAuthFailed)) != ClassAuth {
		t.Error("class of a wrapped auth error")
	}
}
