package lbctl

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
)

// --urgent marks the stored desired state with the author and the command;
// the next write without it clears the mark; an apply of the same file is
// still "no changes"; a shift carries its own mark.
func TestUrgentMarksTheWrite(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	h.mustRun("--author", "alice", "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=70", "SC2=30", "--urgent")
	s, _ := h.desired()
	if s.Urgent == nil || s.Urgent.Author != "alice" || s.Urgent.What != "lbctl weights set" {
		t.Fatalf("urgent mark %+v", s.Urgent)
	}
	if out := h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes"); !strings.Contains(out, "Applied") {
		t.Fatalf("apply over an urgent write:\n%s", out)
	}
	if s, _ := h.desired(); s.Urgent != nil {
		t.Fatalf("a write without --urgent kept the mark %+v", s.Urgent)
	}
	h.mustRun("--author", "bob", "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--urgent")
	if s, _ := h.desired(); s.Urgent == nil || s.Urgent.Author != "bob" || s.Urgent.What != "lbctl drain" {
		t.Fatalf("urgent drain mark %+v", s.Urgent)
	}
	h.mustRun("undrain", "--cluster", "demo-main", "--subcluster", "SC1")
	if s, _ := h.desired(); s.Urgent != nil {
		t.Fatalf("undrain kept the mark %+v", s.Urgent)
	}
	h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes", "--urgent")
	if out := h.mustRun("apply", "-f", "testdata/demo.yaml", "--yes"); !strings.Contains(out, "No changes") {
		t.Fatalf("the mark is not content: an apply of the same file changes nothing:\n%s", out)
	}
	out := h.mustRun("shift", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "--from", "IDC1", "--to", "IDC2", "--percent", "30", "--urgent")
	id := strings.Fields(strings.TrimPrefix(out, "Shift "))[0]
	k, _ := h.layout.Shift(id)
	r, err := h.cli.Get(context.Background(), k)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("shift %s not stored: %v", id, err)
	}
	var sh config.Shift
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &sh); err != nil || !sh.Urgent {
		t.Fatalf("stored shift %+v (%v)", sh, err)
	}
}
