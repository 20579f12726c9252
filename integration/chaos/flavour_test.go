//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// flavour is the etcd server the fleet runs (SLUICE_ETCD_FLAVOUR, set by
// deploy/scripts/chaos.sh): "embedded" (sluice/etcd, the etcd module pinned
// in integration/go.mod; every scenario) or "debian" (sluice/etcd-debian,
// Debian's etcd-server 3.4; the scenarios marked etcd).
func flavour(t *testing.T) string {
	t.Helper()
	switch f := os.Getenv("SLUICE_ETCD_FLAVOUR"); f {
	case "", "embedded":
		return "embedded"
	case "debian":
		return f
	default:
		t.Fatalf("SLUICE_ETCD_FLAVOUR=%q: want embedded or debian", f)
		return ""
	}
}

// checkFlavour checks that every member runs the flavour's server (Debian's
// is a 3.4.x, the embedded one is not) and returns their versions, so a
// debian pass that silently ran the embedded image fails.
func (e *Env) checkFlavour(ctx context.Context, fl string) ([]string, error) {
	var vers []string
	for i, ep := range etcdEndpoints {
		st, err := e.Etcd.Status(ctx, ep)
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", etcdMembers[i], err)
		}
		if is34 := strings.HasPrefix(st.Version, "3.4."); is34 != (fl == "debian") {
			return nil, fmt.Errorf("%s runs etcd %s: not the %s flavour (debian is 3.4.x, embedded is not)", etcdMembers[i], st.Version, fl)
		}
		vers = append(vers, st.Version)
	}
	return vers, nil
}
