package plan

import (
	"errors"
	"sort"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/validate"
)

// Rejection is a proxy cluster whose snapshot the publisher would refuse
// (validate.Snapshot), with the validator's reasons.
type Rejection struct {
	ProxyCluster string
	// Errs are the broken rules, sorted by path.
	Errs validate.Errors
	// FullDrops are the clusters whose row would be all GSLB_BLACKHOLE
	// without allow_full_drop (sorted): the rule an operator overrides
	// explicitly (a pin's or a drain's allow_full_drop).
	FullDrops []string
}

// Check plans v from scratch — no previous snapshots, no pacing, the very
// rules the scheduler runs — and validates every proxy cluster's snapshot
// as the publisher does, as a would-be next version. It returns the
// proxy clusters the scheduler could not publish, sorted; an error only
// when nothing can be planned (no desired state).
//
// lbctl runs it on the inputs in etcd plus a proposed write, to refuse
// before writing what the scheduler would then be blocked on.
func Check(v View) ([]Rejection, error) {
	v.Now = time.Time{}
	v.Generations = nil
	pl, err := NewPlanner().ComputePlan(v, nil)
	if err != nil {
		return nil, err
	}
	var out []Rejection
	for _, pc := range pl.ProxyClusters() {
		s := *pl.Snapshot(pc)
		s.Meta.Version = 1
		err := validate.Snapshot(&s)
		if err == nil {
			continue
		}
		r := Rejection{ProxyCluster: pc}
		if !errors.As(err, &r.Errs) {
			r.Errs = validate.Errors{{Msg: err.Error()}}
		}
		for name, c := range s.Clusters {
			if c.Row.Weights[config.Blackhole] == c.Row.Denominator && !c.Row.AllowFullDrop {
				r.FullDrops = append(r.FullDrops, name)
			}
		}
		sort.Strings(r.FullDrops)
		out = append(out, r)
	}
	return out, nil
}
