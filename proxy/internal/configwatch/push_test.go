package configwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// pushed is what publishPushed wrote: the pointer (with its push) and every
// part digest written so far.
type pushed struct {
	ptr     snapshot.Pointer
	written map[string]bool
}

// publishPushed publishes s as the scheduler does: the parts etcd lacks
// (written: what earlier calls wrote), the manifest, and the pointer
// carrying snapshot.NewPush of the parts written now; edit, when set,
// changes the pointer before it is written (a tampered push).
func publishPushed(t testing.TB, cli interface{ Endpoints() []string }, s *snapshot.Snapshot, written map[string]bool, edit func(*snapshot.Pointer)) pushed {
	t.Helper()
	m, parts, err := snapshot.EncodeStore(s)
	if err != nil {
		t.Fatal(err)
	}
	var fresh []snapshot.Part
	for _, p := range parts {
		if !written[p.Digest] {
			written[p.Digest] = true
			fresh = append(fresh, p)
		}
	}
	ptr := pointerOf(s)
	if ptr.Push, err = snapshot.NewPush(m, fresh); err != nil || ptr.Push == nil {
		t.Fatalf("NewPush: %v, %v", ptr.Push, err)
	}
	if edit != nil {
		edit(&ptr)
	}
	raw, _ := json.Marshal(m)
	publishPtr(t, newClient(t, cli.Endpoints()...), ptr, raw, fresh)
	return pushed{ptr: ptr, written: written}
}

// startPushed publishes v1 of 40 clusters with a push and starts a watcher
// that applied it.
func startPushed(t *testing.T) (*clientv3.Client, *Watcher, *recorder, map[string]bool) {
	t.Helper()
	_, cli := etcdtest.New(t)
	written := map[string]bool{}
	publishPushed(t, cli, manyClusters(1, 40, nil), written, nil)
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply, StoreCheckInterval: time.Hour})
	waitApplied(t, w, rec, 1, 20*time.Second, "v1 applied")
	return cli, w, rec, written
}

// With the manifest and the new parts on the pointer, a proxy that ran the
// parent version makes no etcd request for a one-cluster change; with the
// bucket pushed but not the cluster part, one (the part); with the
// manifest alone, two (bucket, then cluster). Each applies the content
// published, and a small whole-layout snapshot comes whole with the pointer.
func TestPushedChangeReadsOnlyWhatIsNotPushed(t *testing.T) {
	cli, w, rec, written := startPushed(t)

	keepOnly := func(keep func(d string, m snapshot.Manifest) bool) func(*snapshot.Pointer) {
		return func(p *snapshot.Pointer) {
			for d := range p.Push.Parts {
				if !keep(d, p.Push.Manifest) {
					delete(p.Push.Parts, d)
				}
			}
		}
	}
	isBucket := func(d string, m snapshot.Manifest) bool {
		return d == m.Head || strings.Contains(strings.Join(m.Buckets, ","), d)
	}
	rows := map[int]int{} // each version changes one more cluster
	for i, tc := range []struct {
		name  string
		edit  func(*snapshot.Pointer)
		reads uint64
	}{
		{"all pushed", nil, 0},
		{"bucket pushed, cluster not", keepOnly(isBucket), 1},
		{"manifest only", keepOnly(func(string, snapshot.Manifest) bool { return false }), 2},
		{"all pushed again", nil, 0},
	} {
		v := uint64(2 + i)
		rows[7+i] = 20 + i
		s := manyClusters(v, 40, rows)
		before := w.Status()
		publishPushed(t, cli, s, written, tc.edit)
		waitApplied(t, w, rec, v, 20*time.Second, tc.name)
		st := w.Status()
		if st.AppliedHash != s.Meta.Hash {
			t.Fatalf("%s: applied hash %s, want %s", tc.name, st.AppliedHash, s.Meta.Hash)
		}
		if n := st.SnapshotReads - before.SnapshotReads; n != tc.reads {
			t.Fatalf("%s: %d etcd reads, want %d", tc.name, n, tc.reads)
		}
		if n := st.ManifestsPushed - before.ManifestsPushed; n != 1 {
			t.Fatalf("%s: %d pushed manifests used, want 1", tc.name, n)
		}
	}

	// The whole layout (below SplitMinClusters) comes inline in the push.
	small := testSnapshot(9)
	m, parts, err := snapshot.EncodeStore(small)
	if err != nil || m.Encoding != snapshot.Encoding || len(m.Inline) == 0 {
		t.Fatalf("EncodeStore(small): %q inline %d, %v", m.Encoding, len(m.Inline), err)
	}
	before := w.Status().SnapshotReads
	publishPushed(t, cli, small, written, nil)
	waitApplied(t, w, rec, 9, 20*time.Second, "whole-layout v9 applied")
	if n := w.Status().SnapshotReads - before; n != 0 || len(parts) != 0 {
		t.Fatalf("whole layout: %d reads, %d parts; want 0 and 0", n, len(parts))
	}
}

// I5 with a push: a pushed part whose bytes do not match its digest, a
// pushed manifest that is not the pointer's version's, and a pushed
// manifest naming a bucket nobody stored each reject the snapshot, naming
// what is wrong; the last good one stays, and the next good push applies
// reading nothing.
func TestTamperedPushRejected(t *testing.T) {
	cli, w, rec, written := startPushed(t)

	for i, tc := range []struct {
		name string
		edit func(*snapshot.Pointer)
		want string
	}{
		{"pushed part tampered", func(p *snapshot.Pointer) {
			for d, b := range p.Push.Parts {
				if !strings.Contains(strings.Join(p.Push.Manifest.Buckets, ","), d) && d != p.Push.Manifest.Head {
					bad := bytes.Clone(b)
					bad[len(bad)/2] ^= 0xff
					p.Push.Parts[d] = bad
				}
			}
		}, `part digest is`},
		{"pushed manifest of other content", func(p *snapshot.Pointer) {
			p.Push.Manifest.Meta.Hash = manyClusters(1, 40, nil).Meta.Hash
		}, "pointer says"},
		{"pushed manifest names an unknown bucket", func(p *snapshot.Pointer) {
			b := p.Push.Manifest.Buckets
			b[0] = strings.Repeat("0", 64)
			if b[1] == b[0] {
				t.Fatal("buckets collide")
			}
		}, "snapshot part missing"},
	} {
		v := uint64(2 + i)
		publishPushed(t, cli, manyClusters(v, 40, map[int]int{9: 20 + i}), written, tc.edit)
		poll.EventuallyTrue(t, 20*time.Second, tc.name+": rejected", func() bool { return w.Status().RejectedVersion == v })
		st := w.Status()
		if st.AppliedVersion != 1 || rec.last() != 1 || !strings.Contains(st.RejectedReason, tc.want) {
			t.Fatalf("%s: applied v%d (rec %d), rejected %q; want v1 kept and a reason containing %q", tc.name, st.AppliedVersion, rec.last(), st.RejectedReason, tc.want)
		}
	}
	// v5 changes cluster 9 against v1, what the proxy holds: all pushed
	// (v2–v4's parts were written, but v5's row for cluster 9 is new).
	before := w.Status().SnapshotReads
	good := manyClusters(5, 40, map[int]int{9: 33})
	publishPushed(t, cli, good, written, nil)
	waitApplied(t, w, rec, 5, 20*time.Second, "v5 applied")
	if st := w.Status(); st.AppliedHash != good.Meta.Hash || st.SnapshotReads != before {
		t.Fatalf("v5: hash %s (want %s), %d reads (want 0)", st.AppliedHash, good.Meta.Hash, st.SnapshotReads-before)
	}
}

// A push is for its own version only: a pointer that kept the push of an
// earlier version (a pointer move) or of a candidate the proxy is not
// staged for makes the proxy read the stored manifest of the version it
// runs, and it applies that version's content.
func TestPushOfAnotherVersionNotUsed(t *testing.T) {
	_, cli := etcdtest.New(t)
	written := map[string]bool{}
	v1 := publishPushed(t, cli, manyClusters(1, 40, nil), written, nil)
	rec := newRecorder()
	w := start(t, Config{Client: cli, Apply: rec.apply, ID: "p-other", StoreCheckInterval: time.Hour})
	waitApplied(t, w, rec, 1, 20*time.Second, "v1 applied")

	// v2 with v1's push kept (a stale push).
	v2 := manyClusters(2, 40, map[int]int{4: 11})
	publishPushed(t, cli, v2, written, func(p *snapshot.Pointer) { p.Push = v1.ptr.Push })
	waitApplied(t, w, rec, 2, 20*time.Second, "v2 applied despite v1's push")
	st := w.Status()
	if st.AppliedHash != v2.Meta.Hash || st.ManifestsPushed != 1 || st.RejectedVersion != 0 {
		t.Fatalf("v2: hash %s (want %s), %d pushed manifests used (want 1: v1's), rejected v%d", st.AppliedHash, v2.Meta.Hash, st.ManifestsPushed, st.RejectedVersion)
	}

	// v3 is a candidate for another proxy; the pointer's stable version
	// stays v2 and its push is the candidate's.
	cand := manyClusters(3, 40, map[int]int{4: 12})
	publishPushed(t, cli, cand, written, func(p *snapshot.Pointer) {
		p.Version, p.Hash = 2, v2.Meta.Hash
		p.Candidate = &snapshot.Candidate{Version: 3, Hash: cand.Meta.Hash, Rollout: "r1", IDs: []string{"p-canary"}}
	})
	poll.EventuallyTrue(t, 20*time.Second, "the stage reported", func() bool { return w.Status().Rollout == "r1" })
	if st := w.Status(); st.AppliedVersion != 2 || st.RejectedVersion != 0 || st.AppliedHash != v2.Meta.Hash {
		t.Fatalf("outside the stage: applied v%d hash %s, rejected v%d %q; want v2 kept", st.AppliedVersion, st.AppliedHash, st.RejectedVersion, st.RejectedReason)
	}
	if !equal(rec.versions(), []uint64{1, 2}) {
		t.Fatalf("applied %v, want [1 2]", rec.versions())
	}
}

// A pointer seen late (a watch replay) whose pushed manifest names parts
// history trimming already collected is skipped when the pointer has moved
// on, as a missing manifest is; while it is still the pointer, it is an
// error naming the part.
func TestPushedVersionWithCollectedPartsSuperseded(t *testing.T) {
	_, cli := etcdtest.New(t)
	written := map[string]bool{}
	publishPushed(t, cli, manyClusters(1, 40, nil), written, nil)
	v2 := publishPushed(t, cli, manyClusters(2, 40, map[int]int{3: 21}), written, func(p *snapshot.Pointer) { p.Push.Parts = nil })
	// Collect one of v2's parts: its cluster part.
	m := v2.ptr.Push.Manifest
	_, parts, err := snapshot.EncodeStore(manyClusters(2, 40, map[int]int{3: 21}))
	if err != nil {
		t.Fatal(err)
	}
	_, v1parts, _ := snapshot.EncodeStore(manyClusters(1, 40, nil))
	old := map[string]bool{}
	for _, p := range v1parts {
		old[p.Digest] = true
	}
	gone := ""
	for _, p := range parts {
		if !old[p.Digest] && p.Digest != m.Head && !strings.Contains(strings.Join(m.Buckets, ","), p.Digest) {
			gone = p.Digest
		}
	}
	if gone == "" {
		t.Fatal("v2's cluster part not found")
	}
	k, _ := layout.Part(gone)
	if _, err := cli.Delete(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	w := idleWatcher(t, cli)
	ctx := context.Background()
	if _, _, err := w.fetch(ctx, v2.ptr.For(""), v2.ptr.Push); err == nil || errors.Is(err, errSuperseded) || !strings.Contains(err.Error(), "snapshot part missing") {
		t.Fatalf("v2 still current: %v; want a missing part error", err)
	}
	publishPushed(t, cli, manyClusters(3, 40, map[int]int{3: 22}), written, nil)
	if _, _, err := w.fetch(ctx, v2.ptr.For(""), v2.ptr.Push); !errors.Is(err, errSuperseded) {
		t.Fatalf("v2 after v3 was published: %v; want errSuperseded", err)
	}
}

// A pointer whose manifest is missing (history trimming removed it before
// a late watch replay read it) is skipped when the pointer has moved on,
// and rejected naming the manifest key while the pointer still names it.
func TestMissingManifestSupersededOrRejected(t *testing.T) {
	_, cli := etcdtest.New(t)
	publish(t, cli, testSnapshot(1))
	v2 := testSnapshot(2)
	publish(t, cli, v2)
	mk, _ := layout.Snapshot(pc, 2)
	if _, err := cli.Delete(context.Background(), mk); err != nil {
		t.Fatal(err)
	}
	w := idleWatcher(t, cli)
	ctx := context.Background()
	const want = "manifest /sluicetest/snapshots/BFE1/00000000000000000002 is missing"
	if _, _, err := w.fetch(ctx, pointerOf(v2), nil); err == nil || err.Error() != want {
		t.Fatalf("v2 still current: %v; want %q", err, want)
	}
	publish(t, cli, testSnapshot(3))
	if _, _, err := w.fetch(ctx, pointerOf(v2), nil); !errors.Is(err, errSuperseded) {
		t.Fatalf("v2 after v3 was published: %v; want errSuperseded", err)
	}
	if st := w.Status(); st.SnapshotReads != 2 || st.ManifestsPushed != 0 {
		t.Fatalf("%d snapshot reads, %d pushed manifests; want 2 (one manifest get per fetch), 0", st.SnapshotReads, st.ManifestsPushed)
	}
}
