package rollout

import (
	"slices"
	"sort"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
)

// selection is stage st's selection in proxy cluster pc, whose live proxies
// are ids: a percent stage by the hash of each id (the proxies decide), a
// count stage the first ids by that hash, a proxy-cluster stage all or none.
func selection(st config.RolloutStage, pc string, ids []string) snapshot.Candidate {
	// validate: exactly one selector is set, a count ≥ 1 or 0 < percent ≤ 100.
	switch {
	case st.Percent != nil && *st.Percent > 0:
		if *st.Percent >= 100 {
			return snapshot.Candidate{All: true}
		}
		return snapshot.Candidate{Percent: *st.Percent}
	case st.Count != nil && *st.Count > 0:
		sorted := slices.Clone(ids)
		sort.Slice(sorted, func(i, j int) bool {
			hi, hj := snapshot.ProxyHash(sorted[i]), snapshot.ProxyHash(sorted[j])
			if hi != hj {
				return hi < hj
			}
			return sorted[i] < sorted[j]
		})
		if len(sorted) > *st.Count {
			sorted = sorted[:*st.Count]
		}
		sort.Strings(sorted)
		if len(sorted) == 0 {
			return snapshot.Candidate{IDs: []string{}}
		}
		return snapshot.Candidate{IDs: sorted}
	case slices.Contains(st.ProxyClusters, pc):
		return snapshot.Candidate{All: true}
	}
	return snapshot.Candidate{}
}

// selected are the live proxies the candidate's stage selects.
func selected(c *snapshot.Candidate, live []report.ProxyStatus) []report.ProxyStatus {
	var out []report.ProxyStatus
	for _, st := range live {
		if c.Selects(st.ID) {
			out = append(out, st)
		}
	}
	return out
}

func ids(sts []report.ProxyStatus) []string {
	out := make([]string, 0, len(sts))
	for _, st := range sts {
		out = append(out, st.ID)
	}
	sort.Strings(out)
	return out
}
