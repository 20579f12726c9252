package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/api/keys"
)

// The keys of lineages, last-seen records and the scheduler status.
func TestAccessKindsOfTruthfulLoop(t *testing.T) {
	p := filepath.Join(t.TempDir(), "access.conf")
	if err := os.WriteFile(p, []byte(`role r
  read lineage
  readwrite last-seen BFE1 p1
  readwrite last-seen
  readwrite scheduler-status
user u r
`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := parseAccess(p, keys.MustNew(""))
	if err != nil {
		t.Fatal(err)
	}
	want := []Perm{
		{Read: true, Key: "/sluice/lineage"},
		{Read: true, Write: true, Key: "/sluice/last-seen/BFE1/p1"},
		{Read: true, Write: true, Key: "/sluice/last-seen/", Prefix: true},
		{Read: true, Write: true, Key: "/sluice/scheduler-status"},
	}
	if got := a.Roles["r"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("perms %+v\nwant %+v", got, want)
	}
}
