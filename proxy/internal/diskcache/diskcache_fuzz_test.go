package diskcache

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"reflect"
	"testing"
)

// FuzzLoad feeds arbitrary cache files to Load, seeded with a real cache
// file and its near misses (a flipped body byte, a cut body, a wrong
// length, another proxy cluster's header). Either Load rejects the file —
// no snapshot, an error wrapping ErrCorrupt, the file moved aside to
// .corrupt so the next Load sees none — or it returns a snapshot that passed
// every check, and Save of that snapshot then Load gives it back unchanged
// (decode∘encode = id).
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	c, err := Open(dir, "BFE1")
	if err != nil {
		f.Fatal(err)
	}
	if err := c.Save(testSnapshot(3)); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(c.Path())
	if err != nil {
		f.Fatal(err)
	}
	nl := bytes.IndexByte(good, '\n')
	f.Add(good)
	flipped := bytes.Clone(good)
	flipped[nl+1+(len(good)-nl)/2] ^= 0x01
	f.Add(flipped)
	f.Add(good[:len(good)-7])
	f.Add(bytes.Replace(good, []byte("len="), []byte("len=1"), 1))
	f.Add(bytes.Replace(good, []byte("BFE1"), []byte("BFE2"), -1))
	f.Add([]byte(magic + " len=0 sha256=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 version=0\n"))
	f.Add([]byte("SLUICE-not-a-snapshot \x00\xff garbage"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, file []byte) {
		dir := t.TempDir()
		c, err := Open(dir, "BFE1")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.Path(), file, 0o600); err != nil {
			t.Fatal(err)
		}
		checked, err := c.Load()
		s := checked.Snapshot()
		if err != nil {
			if s != nil {
				t.Fatalf("Load returned a snapshot with error %v", err)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load error %v does not wrap ErrCorrupt", err)
			}
			if _, err := os.Stat(c.Path() + ".corrupt"); err != nil {
				t.Fatalf("rejected file not moved aside: %v", err)
			}
			if _, err := c.Load(); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("second Load after a rejection: %v, want not-exist", err)
			}
			return
		}
		if s.Meta.ProxyCluster != "BFE1" {
			t.Fatalf("loaded a snapshot of %q from BFE1's cache", s.Meta.ProxyCluster)
		}
		if err := c.Save(s); err != nil {
			t.Fatalf("Save of a loaded snapshot: %v", err)
		}
		backChecked, err := c.Load()
		if err != nil {
			t.Fatalf("Load after Save: %v", err)
		}
		if back := backChecked.Snapshot(); !reflect.DeepEqual(s, back) {
			t.Fatalf("Save∘Load changed the snapshot:\n%+v\n%+v", s, back)
		}
	})
}
