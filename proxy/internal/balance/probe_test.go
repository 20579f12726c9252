package balance

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// The default active check is the shared prober's (package probe): the same
// request an lbagent sends, judged by the same rules.
func TestDefaultProbeIsTheSharedProber(t *testing.T) {
	var mu sync.Mutex
	var ua, host, path string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ua, host, path = r.UserAgent(), r.Host, r.URL.Path
		mu.Unlock()
		// A redirect is an answer matched against the status, not followed.
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	build := func(status string) *Registry {
		pol := policy(func(p *config.Policy) { p.Health.Probe = config.Probe{Status: status} })
		s := snap(1, pol, 0, sc{name: "A", weight: 100, weights: []int{1}})
		cl := s.Clusters["demo"]
		cl.SubClusters["A"] = config.SubCluster{Instances: []config.Instance{{Addr: addr.Addr().String(), Port: int(addr.Port()), Weight: 1}}}
		r := NewRegistry(RegistryOptions{})
		tb, err := build(s, r)
		if err != nil {
			t.Fatal(err)
		}
		var h Holder
		h.Store(tb) // the policy's probe rules take effect
		return r
	}
	err := build("2xx").ProbeOnce(context.Background(), addr)
	if err == nil || !strings.Contains(err.Error(), "status 302 not in 2xx") {
		t.Fatalf("probe of a 302 with status 2xx: %v", err)
	}
	mu.Lock()
	if ua != "sluice-probe" || host != addr.String() || path != "/healthz" {
		t.Errorf("request: User-Agent %q Host %q path %q; want sluice-probe, %s, /healthz", ua, host, path, addr)
	}
	mu.Unlock()
	if err := build("2xx|3xx").ProbeOnce(context.Background(), addr); err != nil {
		t.Fatalf("probe of a 302 with status 2xx|3xx: %v", err)
	}
}
