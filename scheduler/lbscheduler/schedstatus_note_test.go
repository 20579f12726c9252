package lbscheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/scheduler/internal/publish"
)

// A publish that failed for a reason that passes (etcd) is "retrying": the
// loop tries again, and lbctl's --wait must not end on it; only the
// validator's refusal is "failed" (BLOCKED: a new write is needed).
func TestNoteTellsRetryingFromFailed(t *testing.T) {
	now := time.Unix(1700000000, 0)
	b := &statusBook{results: map[string]report.PublishResult{}}
	b.inputRev = 41
	b.note("BFE1", publish.Result{Outcome: publish.Published, Lineage: "L1", Version: 3}, nil, now)
	b.inputRev = 42
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("publish BFE1 v4: commit: %w", context.DeadlineExceeded), report.PublishRetrying},
		{fmt.Errorf("publish BFE1: %w", publish.ErrConflict), report.PublishRetrying},
		{fmt.Errorf("publish BFE1 v4: %w: row would drop 100%%", publish.ErrInvalid), report.PublishFailed},
		{fmt.Errorf("publish BFE1: %w", publish.ErrFenced), report.PublishFenced},
	}
	for _, c := range cases {
		b.note("BFE1", publish.Result{}, c.err, now)
		got := b.results["BFE1"]
		if got.Result != c.want || got.Reason != c.err.Error() || got.InputRevision != 42 {
			t.Fatalf("note(%v) = %+v, want %s with the error as reason at input revision 42", c.err, got, c.want)
		}
		if c.want != report.PublishFenced && (got.Lineage != "L1" || got.Version != 3) {
			t.Fatalf("note(%v) = %+v: the live snapshot L1 v3 is lost", c.err, got)
		}
	}
}
