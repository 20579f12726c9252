package etcdclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Times in the client's own bookkeeping, on a synctest bubble's fake clock.

// A refused password answers every caller for authRetryGap without asking
// etcd again, then Authenticate is tried again; a token, once had, is
// kept. On the bubble's fake clock the gap is exact to the nanosecond.
func TestFailedAuthenticateAnswersUntilTheRetryGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAuth("u", "wrong", time.Second)
		calls := 0
		answer := rpctypes.ErrGRPCAuthFailed
		a.authenticate = func(context.Context, string, string) (string, error) {
			calls++
			if answer != nil {
				return "", answer
			}
			return "tok", nil
		}
		get := func(when string, wantTok string, wantErr error, wantCalls int) {
			t.Helper()
			tok, err := a.get(context.Background())
			if tok != wantTok || !errors.Is(err, wantErr) || calls != wantCalls {
				t.Fatalf("%s: token %q, err %v, %d Authenticate calls; want %q, %v, %d", when, tok, err, calls, wantTok, wantErr, wantCalls)
			}
		}
		get("first call", "", rpctypes.ErrGRPCAuthFailed, 1)
		get("again at once", "", rpctypes.ErrGRPCAuthFailed, 1)
		time.Sleep(authRetryGap - time.Nanosecond)
		get("just before the gap", "", rpctypes.ErrGRPCAuthFailed, 1)
		answer = nil // the password was fixed in etcd
		time.Sleep(time.Nanosecond)
		get("at the gap", "tok", nil, 2)
		time.Sleep(time.Hour)
		get("an hour later", "tok", nil, 2)
	})
}

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
