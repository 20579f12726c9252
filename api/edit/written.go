package edit

import (
	"fmt"
	"sort"
	"strings"

	"github.com/sluicelb/sluice/api/config"
)

// The sentences lbctl and the dashboard print after a write of the desired
// state. The first names what was written and the desired state's revision
// (docs/lbctl.md "Revisions and --wait" quotes it; scripts match it). It is
// true of the write, not of the traffic: until something saw the proxies
// apply it, NotLive follows it.

// DrainWritten is "Drained demo-main/SC1 (desired state revision 43)." (on)
// or "Undrained …" (off).
func DrainWritten(on bool, cluster, sub string, rev int64) string {
	verb := "Drained"
	if !on {
		verb = "Undrained"
	}
	return fmt.Sprintf("%s %s/%s (desired state revision %d).", verb, cluster, sub, rev)
}

// PinWritten is "Pinned BFE1 row of demo-main to SC1=30 SC2=70 (desired
// state revision 42)."
func PinWritten(pc, cluster string, row map[string]int, rev int64) string {
	return fmt.Sprintf("Pinned %s row of %s to %s (desired state revision %d).", pc, cluster, FormatRow(row, nil), rev)
}

// UnpinWritten is "Unpinned BFE1 row of demo-main (desired state revision
// 42)."
func UnpinWritten(pc, cluster string, rev int64) string {
	return fmt.Sprintf("Unpinned %s row of %s (desired state revision %d).", pc, cluster, rev)
}

// NotLive says what a write of the desired state is not yet: the line
// after the first, until the proxies are seen to run it. pc is the one
// proxy cluster the write concerns ("" for every proxy cluster).
func NotLive(pc string) string {
	who := "the proxies"
	if pc != "" {
		who += " of " + pc
	}
	return "Written to the desired state only: not live until the scheduler publishes it and " + who + " apply it."
}

// ShiftStateWritten is "Shift shift-… is now paused (revision 57).": a
// shift intent moved to state (paused, running, aborted) by a write at
// revision rev.
func ShiftStateWritten(id, state string, rev int64) string {
	return fmt.Sprintf("Shift %s is now %s (revision %d).", id, state, rev)
}

// ShiftNotLive is NotLive for a shift intent just written for proxy
// cluster pc.
func ShiftNotLive(pc string) string {
	return "Not live until the scheduler runs it and the proxies of " + pc + " apply it."
}

// WaitCommand is the lbctl command that waits until every live proxy (of
// pc; "" for all) applied a snapshot computed from revision rev or later.
func WaitCommand(pc string, rev int64) string {
	if pc != "" {
		return fmt.Sprintf("lbctl rollout status --proxy-cluster %s --revision %d --wait", pc, rev)
	}
	return fmt.Sprintf("lbctl rollout status --revision %d --wait", rev)
}

// RowKeys lists a row's sub-clusters sorted, GSLB_BLACKHOLE last.
func RowKeys(row map[string]int) []string {
	ks := make([]string, 0, len(row))
	for k := range row {
		if k != config.Blackhole {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	if _, ok := row[config.Blackhole]; ok {
		ks = append(ks, config.Blackhole)
	}
	return ks
}

// FormatRow prints a row as SC=N in the order given (RowKeys when nil):
// "SC1=30 SC2=70 GSLB_BLACKHOLE=0".
func FormatRow(row map[string]int, order []string) string {
	if order == nil {
		order = RowKeys(row)
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s=%d", k, row[k])
	}
	return strings.Join(parts, " ")
}
