package snapshot_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapshot"
)

func TestLineageRoundTripAndMismatch(t *testing.T) {
	s := bigSnapshot(1, 2)
	s.Meta.Lineage = "20261201T090312Z-3fa9c2d1"
	m, st := encodeToStore(t, s)
	if m.Meta.Lineage != s.Meta.Lineage {
		t.Fatalf("manifest lineage %q, want %q", m.Meta.Lineage, s.Meta.Lineage)
	}
	got, err := snapshot.Decode(m, st.get)
	if err != nil || got.Meta.Lineage != s.Meta.Lineage {
		t.Fatalf("Decode = %v, %v; want lineage %s", got, err, s.Meta.Lineage)
	}
	// A manifest claiming another lineage than its content is refused.
	m.Meta.Lineage = "other"
	_, err = snapshot.Decode(m, st.get)
	want := "decode snapshot: content is BFE1 v42 (lineage 20261201T090312Z-3fa9c2d1), manifest says BFE1 v42 (lineage other)"
	if err == nil || err.Error() != want {
		t.Fatalf("Decode with a lying manifest: %v\nwant %s", err, want)
	}
}

// Documents written before lineages decode strictly, with the unknown lineage.
func TestOldDocumentsHaveUnknownLineage(t *testing.T) {
	var p snapshot.Pointer
	if err := codec.UnmarshalJSON([]byte(`{"version":18,"hash":"abc"}`), &p); err != nil || p.Lineage != "" || p.Version != 18 {
		t.Fatalf("old pointer: %+v, %v", p, err)
	}
	s := bigSnapshot(1, 1)
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(`"lineage"`)) {
		t.Fatalf("a snapshot without lineage encodes the field: %s", raw[:200])
	}
	got, err := snapshot.Unmarshal(raw)
	if err != nil || got.Meta.Lineage != "" {
		t.Fatalf("old snapshot: %v, %v", got, err)
	}
	if snapshot.LineageName("") != "unknown" || snapshot.LineageName("L1") != "L1" {
		t.Fatal("LineageName")
	}
	// The lineage is identity, not content: the hash ignores it.
	h := snapshot.ContentHash(s)
	s.Meta.Lineage = "L2"
	if snapshot.ContentHash(s) != h {
		t.Fatal("content hash depends on the lineage")
	}
}

func TestNewLineageID(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 3, 12, 0, time.FixedZone("x", 3600))
	a, b := snapshot.NewLineageID(now), snapshot.NewLineageID(now)
	if a == b {
		t.Fatalf("two ids minted at once are equal: %s", a)
	}
	if !strings.HasPrefix(a, "20261201T080312Z-") || len(a) != len("20261201T080312Z-")+8 {
		t.Fatalf("id %q", a)
	}
	if err := snapshot.ValidLineage(a); err != nil {
		t.Fatal(err)
	}
	if err := snapshot.ValidLineage(""); err != nil {
		t.Fatalf("the unknown lineage: %v", err)
	}
	err := snapshot.ValidLineage("a/b")
	if err == nil || err.Error() != `lineage "a/b" has '/' at 1; want 1..64 characters of A-Z a-z 0-9 . _ -` {
		t.Fatalf("ValidLineage(a/b) = %v", err)
	}
	if err := snapshot.ValidLineage(strings.Repeat("x", 65)); err == nil || !strings.Contains(err.Error(), "is 65 characters") {
		t.Fatalf("long id: %v", err)
	}
}
