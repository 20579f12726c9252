package etcdclient

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

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
