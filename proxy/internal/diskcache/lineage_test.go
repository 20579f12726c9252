package diskcache

import (
	"os"
	"strings"
	"testing"
)

// The lineage is kept with the snapshot; a file written before lineages
// (no lineage field) loads with the unknown lineage "".
func TestLineageKeptAndOldFilesUnknown(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir)
	s := testSnapshot(18)
	s.Meta.Lineage = "20261201T090312Z-3fa9c2d1"
	if err := c.Save(s); err != nil {
		t.Fatal(err)
	}
	got, err := c.Load()
	if err != nil || got.Snapshot().Meta.Lineage != s.Meta.Lineage || got.Snapshot().Meta.Version != 18 {
		t.Fatalf("Load = %+v, %v", got, err)
	}
	// An old file: the same format without the lineage field.
	if err := c.Save(testSnapshot(18)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(c.Path())
	if err != nil || strings.Contains(string(raw), `"lineage"`) {
		t.Fatalf("old-format file has a lineage field: %v", err)
	}
	got, err = open(t, dir).Load()
	if err != nil || got.Snapshot().Meta.Lineage != "" || got.Snapshot().Meta.Version != 18 {
		t.Fatalf("old file Load = %+v, %v", got, err)
	}
}
