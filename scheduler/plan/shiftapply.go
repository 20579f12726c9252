package plan

import (
	"fmt"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// ShiftResult is what a shift moved in its row, in percent of the row (the
// shift's own unit), and why it moved less than asked.
type ShiftResult struct {
	Asked int `json:"asked_percent"`
	Moved int `json:"moved_percent"`
	// Reason is set when Moved < Asked, e.g. "IDC1 had 15".
	Reason string `json:"reason,omitempty"`
}

func (p *ClusterPlan) addShift(id string, r ShiftResult) {
	if p.Shifts == nil {
		p.Shifts = map[string]ShiftResult{}
	}
	p.Shifts[id] = r
}

// ShiftResults gathers every cluster's shift results by shift id.
func (p *Plan) ShiftResults() map[string]ShiftResult {
	out := map[string]ShiftResult{}
	for _, c := range p.Clusters {
		for id, r := range c.Shifts {
			out[id] = r
		}
	}
	return out
}

// applyShift moves the shift's applied points of the row from the
// sub-clusters in IDC From (in proportion to their weight, capped by what
// they have) to the available sub-clusters in IDC To (in proportion to
// capacity). It reports what it moved.
func applyShift(row map[string]int, as ActiveShift, scs []string, subs map[string]config.SubCluster, avail map[string]bool, byCap func(string) float64, set settings, e *snapshot.Explanation) ShiftResult {
	sh := as.Shift
	res := ShiftResult{Asked: as.AppliedPercent}
	want := set.points(as.AppliedPercent)
	if want <= 0 {
		return res
	}
	var from, to []string
	for _, name := range scs {
		switch subs[name].IDC {
		case sh.From:
			from = append(from, name)
		case sh.To:
			if avail[name] {
				to = append(to, name)
			}
		}
	}
	if len(to) == 0 {
		res.Reason = fmt.Sprintf("no available sub-cluster in %s", sh.To)
		e.Notes = append(e.Notes, fmt.Sprintf("shift %s cannot apply: no available sub-cluster in IDC %s", sh.ID, sh.To))
		return res
	}
	moved := take(row, want, from)
	res.Moved = moved * 100 / set.den
	if moved == 0 {
		res.Reason = fmt.Sprintf("%s had 0", sh.From)
		e.Notes = append(e.Notes, fmt.Sprintf("shift %s: nothing to move, IDC %s has no weight in this row", sh.ID, sh.From))
		return res
	}
	spread(row, moved, to, byCap)
	note := fmt.Sprintf("shift %s: moved %d points from IDC %s to IDC %s", sh.ID, moved, sh.From, sh.To)
	if moved < want {
		res.Reason = fmt.Sprintf("%s had %d", sh.From, res.Moved)
		note += fmt.Sprintf(" (asked %d, capped by what IDC %s had)", want, sh.From)
	} else {
		res.Moved = res.Asked
	}
	e.Notes = append(e.Notes, note)
	return res
}
