package lbagent

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/logcheck"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// No JSON log line of the agent repeats a key: the admin address is
// admin_addr, next to the backend's addr that every line carries.
func TestLogLinesHaveNoDuplicateKeys(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b := newBackend(t)
	var logs syncbuf.Buffer
	cfg := baseConfig(t, srv, b)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := startAgent(t, cfg)
	poll.EventuallyTrue(t, 10*time.Second, "registration", func() bool {
		_, _, ok := getInstance(t, cli, r.a.Key())
		return ok
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"admin listening"`) {
		t.Fatalf("no admin listening line:\n%s", logs.String())
	}
	for _, p := range logcheck.DuplicateKeys(logs.String()) {
		t.Error(p)
	}
}
