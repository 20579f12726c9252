package etcdclient

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The failing spell is measured from its first failure: LastErrorAt moves
// with each failure, and the recovery line says how long the whole spell
// lasted. Exact on the bubble's fake clock.
func TestHealthTimesTheFailingSpell(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		h := newHealth(slog.New(slog.NewJSONHandler(&buf, nil)), func(err error, _ string) error { return err })
		t0 := time.Now()
		h.observe(rpctypes.ErrGRPCAuthFailed, "k")
		time.Sleep(1500 * time.Millisecond)
		h.observe(rpctypes.ErrGRPCAuthFailed, "k")
		if at := h.state().LastErrorAt; !at.Equal(t0.Add(1500 * time.Millisecond)) {
			t.Fatalf("LastErrorAt %s after the second failure, want t0+1.5s (%s)", at, t0.Add(1500*time.Millisecond))
		}
		time.Sleep(time.Second)
		buf.Reset()
		h.observe(nil, "k")
		var line struct {
			Msg        string `json:"msg"`
			FailingFor string `json:"failing_for"`
		}
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("recovery line %q: %v", buf.String(), err)
		}
		if line.Msg != "etcd usable again" || line.FailingFor != "2.5s" {
			t.Fatalf("recovery line %q, want \"etcd usable again\" failing_for 2.5s (from the first failure)", buf.String())
		}
	})
}
