package plan

import (
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/snapshot"
)

// pace is what the planner remembers of one computed row to pace
// max_step_percent in time: the live weights it last saw and when they
// moved to them.
type pace struct {
	weights map[string]int
	since   time.Time
}

// paced returns, for cluster name, the proxy clusters whose live row moved
// less than step_interval before now (with when they may move again), a key
// of that set for the cache, and the earliest of those times. A row first
// seen is not paced (a new leader may take one step at once); a row seen to
// change is paced from the live snapshot's creation (at the latest, now).
// With a zero now (a pure plan, as lbctl runs it) nothing is paced.
func (p *Planner) paced(now time.Time, name string, proxies []string, prev map[string]*snapshot.Snapshot, set settings) (map[string]time.Time, string, time.Time) {
	if now.IsZero() {
		return nil, "", time.Time{}
	}
	if p.paces == nil {
		p.paces = map[string]*pace{}
	}
	var out map[string]time.Time
	var next time.Time
	for _, pc := range proxies {
		k := name + "\x00" + pc
		pr := prevRowOf(prev[pc], name, set.den)
		if pr.row == nil {
			delete(p.paces, k)
			continue
		}
		m := p.paces[k]
		switch {
		case m == nil:
			p.paces[k] = &pace{weights: maps.Clone(pr.row.Weights)}
			continue
		case !maps.Equal(m.weights, pr.row.Weights):
			m.weights = maps.Clone(pr.row.Weights)
			m.since = now
			if c := prev[pc].Meta.CreatedAt; !c.IsZero() && c.Before(now) {
				m.since = c
			}
		}
		until := m.since.Add(set.stepInterval)
		if m.since.IsZero() || !now.Before(until) {
			continue
		}
		if out == nil {
			out = map[string]time.Time{}
		}
		out[pc] = until
		if next.IsZero() || until.Before(next) {
			next = until
		}
	}
	return out, pacedKey(out), next
}

func pacedKey(paced map[string]time.Time) string {
	if len(paced) == 0 {
		return ""
	}
	pcs := make([]string, 0, len(paced))
	for pc, t := range paced {
		pcs = append(pcs, pc+"@"+t.UTC().Format(time.RFC3339Nano))
	}
	sort.Strings(pcs)
	return strings.Join(pcs, ",")
}

// forgetPaces drops the rows of clusters no longer in the state.
func (p *Planner) forgetPaces(clusters map[string]bool) {
	for k := range p.paces {
		name, _, _ := strings.Cut(k, "\x00")
		if !clusters[name] {
			delete(p.paces, k)
		}
	}
}
