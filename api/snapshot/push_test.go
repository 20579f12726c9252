package snapshot_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/snapshot"
)

// freshParts are the parts of s that old lacks.
func freshParts(t testing.TB, s *snapshot.Snapshot, old store) (snapshot.Manifest, []snapshot.Part) {
	t.Helper()
	m, parts, err := snapshot.EncodeStore(s)
	if err != nil {
		t.Fatal(err)
	}
	var fresh []snapshot.Part
	for _, p := range parts {
		if old[p.Digest] == nil {
			fresh = append(fresh, p)
		}
	}
	return m, fresh
}

// A one-cluster change at 200 clusters pushes the manifest, the changed
// bucket and the changed cluster's part within PushLimit, and a reader
// that holds the parent's parts decodes the new version from them and the
// push alone.
func TestPushCarriesOneClusterChange(t *testing.T) {
	s := bigSnapshot(200, 3)
	_, old := splitToStore(t, s)
	m, fresh := freshParts(t, oneChanged(200, 3, "c17"), old)
	p, err := snapshot.NewPush(m, fresh)
	if err != nil || p == nil {
		t.Fatalf("NewPush: %v, %v", p, err)
	}
	raw, _ := json.Marshal(p)
	if len(raw) > snapshot.PushLimit {
		t.Fatalf("push is %d bytes, limit %d", len(raw), snapshot.PushLimit)
	}
	if len(fresh) != 2 || len(p.Parts) != 2 {
		t.Fatalf("%d fresh parts, %d pushed; want 2 and 2 (bucket, cluster)", len(fresh), len(p.Parts))
	}
	var back snapshot.Push
	if err := codec.UnmarshalJSON(raw, &back); err != nil {
		t.Fatal(err)
	}
	get := func(ds []string) ([][]byte, error) {
		out := make([][]byte, len(ds))
		for i, d := range ds {
			if out[i] = back.Part(d); out[i] == nil {
				out[i] = old[d]
			}
		}
		return out, nil
	}
	got, err := snapshot.DecodeBatch(back.Manifest, get)
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Hash != m.Meta.Hash || got.Clusters["c17"].Row.Weights["SC1"] != 5000 {
		t.Fatalf("decoded hash %s c17 %v; want %s with SC1 5000", got.Meta.Hash, got.Clusters["c17"].Row.Weights, m.Meta.Hash)
	}
}

// Tree parts (head, buckets) go first, then clusters, never the
// explanations part; what does not fit is left out; a manifest that does
// not fit alone is no push.
func TestPushPriorityAndLimit(t *testing.T) {
	s := bigSnapshot(200, 3)
	for name, c := range s.Clusters {
		c.Explanation = &snapshot.Explanation{Mode: "optimal", DemandRPS: 1}
		s.Clusters[name] = c
	}
	m, all := freshParts(t, s, store{}) // a first publish: every part is fresh
	if m.Explain == "" {
		t.Fatal("no explanations part")
	}
	p, err := snapshot.NewPush(m, all)
	if err != nil || p == nil {
		t.Fatalf("NewPush: %v, %v", p, err)
	}
	raw, _ := json.Marshal(p)
	if len(raw) > snapshot.PushLimit {
		t.Fatalf("push is %d bytes, limit %d", len(raw), snapshot.PushLimit)
	}
	if p.Part(m.Explain) != nil {
		t.Fatal("the explanations part was pushed")
	}
	// The head and some buckets fit: the head is pushed, and a bucket left
	// out means no cluster part was pushed after it... unless it fitted
	// where the bucket did not; every pushed part is one of m's.
	if p.Part(m.Head) == nil {
		t.Fatal("the head part was not pushed")
	}
	tree := map[string]bool{m.Head: true}
	for _, b := range m.Buckets {
		tree[b] = true
	}
	var trees, clusters int
	for d := range p.Parts {
		if tree[d] {
			trees++
		} else {
			clusters++
		}
	}
	if trees < 2 || trees+clusters != len(p.Parts) {
		t.Fatalf("pushed %d tree parts and %d cluster parts", trees, clusters)
	}

	big := m
	big.Meta.Reason = strings.Repeat("x", snapshot.PushLimit)
	if p, err := snapshot.NewPush(big, all); err != nil || p != nil {
		t.Fatalf("a manifest over PushLimit: push %v, err %v; want none", p, err)
	}
}

// ManifestFor gives the pushed manifest for its own version only.
func TestPushManifestFor(t *testing.T) {
	m, _, err := snapshot.EncodeStore(oneChanged(200, 3, "c1"))
	if err != nil {
		t.Fatal(err)
	}
	p := &snapshot.Push{Manifest: m}
	if got, ok := p.ManifestFor(snapshot.Pointer{Version: 43}); !ok || got.Meta.Hash != m.Meta.Hash {
		t.Fatalf("version 43: ok %v", ok)
	}
	if _, ok := p.ManifestFor(snapshot.Pointer{Version: 42}); ok {
		t.Fatal("a push for v43 served v42")
	}
	var none *snapshot.Push
	if _, ok := none.ManifestFor(snapshot.Pointer{Version: 43}); ok || none.Part(m.Head) != nil {
		t.Fatal("a nil push served something")
	}
}

// The pointer of the previous release, decoded strictly as it did: a
// pointer with a push is refused (unknown field), so such a proxy keeps
// its snapshot; a pointer without one still decodes into both.
func TestOldReleaseRefusesPushedPointer(t *testing.T) {
	type oldPointer struct {
		Lineage   string              `json:"lineage,omitempty"`
		Version   uint64              `json:"version"`
		Hash      string              `json:"hash"`
		Candidate *snapshot.Candidate `json:"candidate,omitempty"`
	}
	m, _, _ := snapshot.EncodeStore(oneChanged(200, 3, "c1"))
	with, _ := json.Marshal(snapshot.Pointer{Version: 43, Hash: m.Meta.Hash, Push: &snapshot.Push{Manifest: m}})
	var old oldPointer
	if err := codec.UnmarshalJSON(with, &old); err == nil || !strings.Contains(err.Error(), "push") {
		t.Fatalf("old release decoding a pushed pointer: %v; want an unknown field error naming push", err)
	}
	without, _ := json.Marshal(oldPointer{Version: 43, Hash: m.Meta.Hash})
	var p snapshot.Pointer
	if err := codec.UnmarshalJSON(without, &p); err != nil || p.Push != nil || p.Version != 43 {
		t.Fatalf("new release decoding an old pointer: %+v, %v", p, err)
	}
}
