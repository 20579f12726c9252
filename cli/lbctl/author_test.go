package lbctl

import "testing"

// Intents record --author when given, else $USER@host.
func TestIntentAuthor(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	h.mustRun("--author", "alice", "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "maintenance")
	h.mustRun("drain", "--cluster", "demo-static", "--subcluster", "STATIC1", "--allow-full-drop")
	s, _ := h.desired()
	if len(s.Drains) != 2 || s.Drains[0].Author != "alice" || s.Drains[0].Reason != "maintenance" || s.Drains[1].Author != defaultAuthor() {
		t.Fatalf("drains %+v; want alice's then %s's", s.Drains, defaultAuthor())
	}
}
