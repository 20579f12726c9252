package balance

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// A request that a valid sticky cookie sends to its instance gets
// 1+retry_max attempts in that sub-cluster, as any other first pick (the
// cookie's pick counts as the primary's first use), then its cross retries.
func TestStickyCookieRetriesWithinRetryMax(t *testing.T) {
	pol := modePolicy(config.InstanceStickyCookie)
	pol.Retry.RetryMax, pol.Retry.CrossRetry = 1, 1
	pol.Retry.BudgetPercent, pol.Retry.BudgetMin = 100, 1000
	e := newEnv(t, snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1, 1, 1, 1}}, sc{name: "B", weight: 0, weights: []int{1, 1}}))
	c := e.cluster()
	target := inst(1, 0)
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	req.AddCookie(&http.Cookie{Name: c.cookie, Value: base64.RawURLEncoding.EncodeToString(c.cookieMAC(target.String()))})
	s := c.NewSelection(req, netip.Addr{})
	defer s.Release()
	var picks []Pick
	var err error
	for range 8 {
		var p Pick
		if p, err = s.Next(); err != nil {
			break
		}
		picks = append(picks, p)
		p.Done(Result{Err: errors.New("backend failed")})
	}
	if len(picks) != 3 || !errors.Is(err, ErrAttemptsExhausted) {
		t.Fatalf("%d attempts, then %v; want 3 (1+retry_max in A, cross_retry in B) then ErrAttemptsExhausted", len(picks), err)
	}
	if p := picks[0]; p.Reason() != "cookie" || p.Endpoint().Addr() != target {
		t.Fatalf("first pick %v by %q; want %v by cookie", p.Endpoint().Addr(), p.Reason(), target)
	}
	if p := picks[1]; p.Endpoint().Addr() == target || p.Cross() || p.Attempt() != 2 {
		t.Fatalf("retry %v (cross %v, attempt %d); want another instance of A, attempt 2", p.Endpoint().Addr(), p.Cross(), p.Attempt())
	}
	if p := picks[2]; p.SubCluster() != "B" || !p.Cross() || p.Attempt() != 3 {
		t.Fatalf("third attempt in %s (cross %v, attempt %d); want B, cross, attempt 3", p.SubCluster(), p.Cross(), p.Attempt())
	}
}
