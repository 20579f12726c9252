package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	err := newApp(&out).RunContext(ctx, append([]string{"lbscheduler"}, args...))
	return out.String(), err
}

func TestVersionAndBadFlags(t *testing.T) {
	ctx := context.Background()
	if out, err := run(ctx, "version"); err != nil || out != "lbscheduler dev\n" {
		t.Fatalf("version: %q %v", out, err)
	}
	if out, err := run(ctx, "--version"); err != nil || out != "lbscheduler version dev\n" {
		t.Fatalf("--version: %q %v", out, err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--etcd", "http://127.0.0.1:1"}, "--id is required"},
		{[]string{"--id", "S1", "--etcd", "http://127.0.0.1:1", "--api", "0.0.0.0:0"}, "api-token"},
		{[]string{"--id", "../x", "--etcd", "http://127.0.0.1:1"}, "scheduler id"},
		{[]string{"--id", "S1", "--etcd-cert", "/nonexistent"}, "go together"},
		{[]string{"plan", "--input", "x.yaml", "--output", "xml"}, "want table or json"},
		{[]string{"plan", "--input", "/nonexistent.yaml"}, "read scenario"},
	}
	for _, tc := range cases {
		_, err := run(ctx, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestPlanOffline runs the example scenario of scheduler/scenario through
// the subcommand: the table is the golden one, the JSON decodes.
func TestPlanOffline(t *testing.T) {
	ctx := context.Background()
	out, err := run(ctx, "plan", "--input", "../../scenario/testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile("../../scenario/testdata/example.table.golden")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(golden) {
		t.Fatalf("table output differs from the scenario golden file:\n%s", out)
	}
	out, err = run(ctx, "plan", "-i", "../../scenario/testdata/example.yaml", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v) == 0 {
		t.Fatalf("json output: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("bogus_field: 1\n"), 0o600)
	if _, err := run(ctx, "plan", "--input", bad); err == nil || !strings.Contains(err.Error(), "bogus_field") {
		t.Fatalf("bad scenario: %v", err)
	}
}

// TestRunLeadsAndResignsOnShutdown starts the real command against embedded
// etcd, waits until it leads, cancels (as SIGTERM does) and checks the
// leader key and election key are gone at once (lease revoked, not expired).
func TestRunLeadsAndResignsOnShutdown(t *testing.T) {
	srv, cli := etcdtest.New(t)
	layout := keys.MustNew("/sluice")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, "--id", "S1", "--etcd", strings.Join(srv.Endpoints, ","), "--api", "127.0.0.1:0", "--session-ttl", "30s", "--log-level", "error")
		done <- err
	}()
	defer cancel() // also when the wait below fails
	poll.Eventually(t, 20*time.Second, "S1 becomes leader", func() error {
		r, err := cli.Get(context.Background(), layout.Leader())
		if err != nil {
			return err
		}
		if len(r.Kvs) != 1 || !strings.Contains(string(r.Kvs[0].Value), `"id":"S1"`) {
			return fmt.Errorf("leader key holds %d values", len(r.Kvs))
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{layout.Leader(), layout.Election()} {
		r, err := cli.Get(context.Background(), k, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != 0 {
			t.Fatalf("%s still has %d keys after shutdown (%v): the session was not revoked", k, r.Count, err)
		}
	}
}

// The etcd flags are api/etcdclient's: --help shows the canonical names,
// and SLUICE_ETCD_ENDPOINTS sets the endpoints (a bad one is named).
func TestEtcdFlagsHelpAndEnv(t *testing.T) {
	ctx := context.Background()
	out, err := run(ctx, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--etcd-endpoints value, --etcd value", "$SLUICE_ETCD_ENDPOINTS", "--etcd-dial-timeout", "--etcd-cacert", "--etcd-user", "http://127.0.0.1:2379"} {
		if !strings.Contains(out, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	t.Setenv("SLUICE_ETCD_ENDPOINTS", "ftp://h:1")
	if _, err := run(ctx, "--id", "S1", "--api", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), `etcd endpoint "ftp://h:1"`) {
		t.Fatalf("SLUICE_ETCD_ENDPOINTS=ftp://h:1: %v", err)
	}
}
