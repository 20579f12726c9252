package lbctl

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// captureStderr runs f with the process's stderr (where the etcd client's
// default logger would write) sent to a pipe, and returns what was written.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	got := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		_, _ = io.Copy(&b, r)
		got <- b.String()
	}()
	f()
	os.Stderr = saved
	w.Close()
	s := <-got
	r.Close()
	return s
}

// etcd errors arrive within --timeout, name the endpoint and the cause, and
// no etcd-client log line reaches the terminal.
func TestEtcdErrorsNameEndpointAndCause(t *testing.T) {
	down, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	down.Stop()
	auth, err := etcdtest.Start(etcdtest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(auth.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := auth.EnableAuth(ctx); err != nil {
		t.Fatal(err)
	}
	if err := auth.AddUser(ctx, "sluice", "pw", "/sluice/"); err != nil {
		t.Fatal(err)
	}
	hp := func(s *etcdtest.Server) string { return strings.TrimPrefix(s.Endpoints[0], "http://") }
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
		max  time.Duration
	}{
		{"refused", []string{"--endpoints", down.Endpoints[0], "--timeout", "2s", "weights", "get"}, ExitError,
			"etcd " + hp(down) + ": unreachable (connection refused)", 2500 * time.Millisecond},
		{"refused, default --timeout", []string{"--endpoints", down.Endpoints[0], "weights", "get"}, ExitError,
			"etcd " + hp(down) + ": unreachable (connection refused)", 3500 * time.Millisecond},
		{"wrong password", []string{"--endpoints", auth.Endpoints[0], "--user", "sluice", "--password", "nope", "--timeout", "2s", "weights", "get"}, ExitError,
			"etcd " + hp(auth) + ": authentication failed (wrong user or password) for user sluice", 3 * time.Second},
		{"no user", []string{"--endpoints", auth.Endpoints[0], "--timeout", "2s", "weights", "get"}, ExitError,
			"etcd " + hp(auth) + ": authentication required: etcd has auth enabled and no user was given", 3 * time.Second},
		{"malformed endpoint", []string{"--endpoints", "bogus:::1", "weights", "get"}, ExitUsage,
			`usage: --endpoints: etcd endpoint "bogus:::1": want host:port or http(s)://host:port (too many colons in address)`, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			var code int
			t0 := time.Now()
			leaked := captureStderr(t, func() {
				code = Main(append([]string{"lbctl"}, tc.args...), &out, &errb, strings.NewReader(""))
			})
			took := time.Since(t0)
			if code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), tc.code, tc.want)
			}
			if took > tc.max {
				t.Errorf("took %s, want within %s", took, tc.max)
			}
			if leaked != "" {
				t.Errorf("the etcd client wrote to the process's stderr:\n%s", leaked)
			}
		})
	}
}
