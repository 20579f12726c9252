package edit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// CheckShift validates a new shift intent against the desired state s
// before it is written: the shift's own rules (config.Shift.Check), then
// that its proxy cluster, cluster and IDCs exist and that the cluster has a
// sub-cluster in both IDCs. The error starts "invalid shift; nothing was
// written:" and names every broken rule.
func CheckShift(s *config.State, sh config.Shift) error {
	var errs []error
	if err := sh.Check(); err != nil {
		errs = append(errs, err)
	}
	if _, ok := s.Topology.ProxyClusters[sh.ProxyCluster]; !ok {
		errs = append(errs, fmt.Errorf("--proxy-cluster %q does not exist", sh.ProxyCluster))
	}
	cl, ok := s.Clusters[sh.Cluster]
	if !ok {
		errs = append(errs, fmt.Errorf("--cluster %q does not exist", sh.Cluster))
	}
	for _, idc := range []string{sh.From, sh.To} {
		if !slices.Contains(s.Topology.IDCs, idc) {
			errs = append(errs, fmt.Errorf("IDC %q does not exist", idc))
			continue
		}
		if ok && !clusterHasIDC(cl, idc) {
			errs = append(errs, fmt.Errorf("cluster %q has no sub-cluster in %s", sh.Cluster, idc))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid shift; nothing was written: %w", errors.Join(errs...))
	}
	return nil
}

func clusterHasIDC(c config.Cluster, idc string) bool {
	for _, sc := range c.SubClusters {
		if sc.IDC == idc {
			return true
		}
	}
	return false
}

// NewID is a fresh intent id, e.g. "shift-20261201T120000-1a2b3c4d".
func NewID(prefix string, now time.Time) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%s-%s", prefix, now.UTC().Format("20060102T150405"), hex.EncodeToString(b))
}

// ShiftCreated is the sentence lbctl and the dashboard print for a shift
// they wrote at revision rev.
func ShiftCreated(sh config.Shift, rev int64) string {
	text := fmt.Sprintf("Shift %s created: %d points of %s's %s traffic from %s to %s", sh.ID, sh.Percent, sh.ProxyCluster, sh.Cluster, sh.From, sh.To)
	if sh.Ramp > 0 {
		text += fmt.Sprintf(" over %s in steps of %d", sh.Ramp, sh.StepPercent)
	}
	return text + fmt.Sprintf(" (revision %d).", rev)
}
