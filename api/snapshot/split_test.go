package snapshot_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

func splitToStore(t testing.TB, s *snapshot.Snapshot) (snapshot.Manifest, store) {
	t.Helper()
	m, parts, err := snapshot.EncodeSplit(s)
	if err != nil {
		t.Fatal(err)
	}
	st := store{}
	for _, p := range parts {
		st[p.Digest] = p.Data
	}
	// The manifest goes through etcd as JSON.
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back snapshot.Manifest
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	return back, st
}

// oneChanged is bigSnapshot(clusters, perSub) as version 43 with cluster
// name's row changed.
func oneChanged(clusters, perSub int, name string) *snapshot.Snapshot {
	s := bigSnapshot(clusters, perSub)
	c := s.Clusters[name]
	c.Row.Weights = map[string]int{"SC1": 5000, "SC2": 4000, config.Blackhole: 1000}
	s.Clusters[name] = c
	s.Meta.Version, s.Meta.Hash = 43, ""
	return s
}

func (st store) many(ds []string) ([][]byte, error) {
	out := make([][]byte, len(ds))
	for i, d := range ds {
		out[i] = st[d]
	}
	return out, nil
}

func gz(t testing.TB, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	return buf.Bytes()
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestSplitRoundTrip(t *testing.T) {
	s := bigSnapshot(200, 3)
	m, st := splitToStore(t, s)
	if m.Encoding != snapshot.EncodingSplit || len(m.Buckets) != 16 || len(m.Inline) != 0 || len(m.Parts) != 0 {
		t.Fatalf("manifest: encoding %q, %d buckets, %d inline, %d parts; want split, 16 buckets", m.Encoding, len(m.Buckets), len(m.Inline), len(m.Parts))
	}
	if len(st) != 1+16+200 {
		t.Fatalf("%d parts, want 217 (head, 16 buckets, 200 clusters)", len(st))
	}
	for name, d := range map[string]func(snapshot.Manifest) (*snapshot.Snapshot, error){
		"Decode":      func(m snapshot.Manifest) (*snapshot.Snapshot, error) { return snapshot.Decode(m, st.get) },
		"DecodeBatch": func(m snapshot.Manifest) (*snapshot.Snapshot, error) { return snapshot.DecodeBatch(m, st.many) },
	} {
		got, err := d(m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("%s: decoded snapshot differs from the encoded one", name)
		}
	}
	refs, err := snapshot.Refs(m, st.many)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(refs)
	var all []string
	for d := range st {
		all = append(all, d)
	}
	slices.Sort(all)
	if !slices.Equal(refs, all) {
		t.Fatalf("Refs lists %d digests, the store has %d", len(refs), len(all))
	}
	// The disk cache's whole snapshot gives the very same parts.
	if got := snapshot.PartsOf(s); !reflect.DeepEqual(got, map[string][]byte(st)) {
		t.Fatalf("PartsOf gives %d parts, not the %d encoded", len(got), len(st))
	}
}

// A one-cluster change makes exactly two new parts: the cluster and its bucket.
func TestSplitOneClusterChangeIsTwoParts(t *testing.T) {
	s := bigSnapshot(200, 3)
	_, old := splitToStore(t, s)
	m2, cur := splitToStore(t, oneChanged(200, 3, "c17"))
	var fresh []string
	for d := range cur {
		if old[d] == nil {
			fresh = append(fresh, d)
		}
	}
	b := m2.Buckets[snapshot.BucketOf("c17", len(m2.Buckets))]
	if len(fresh) != 2 || !slices.Contains(fresh, b) {
		t.Fatalf("new parts %v, want the bucket %s and c17's part", fresh, b)
	}
}

func TestEncodeStoreChoosesLayout(t *testing.T) {
	for _, tc := range []struct {
		clusters int
		want     string
	}{{1, snapshot.Encoding}, {snapshot.SplitMinClusters - 1, snapshot.Encoding}, {snapshot.SplitMinClusters, snapshot.EncodingSplit}} {
		m, _, err := snapshot.EncodeStore(bigSnapshot(tc.clusters, 2))
		if err != nil || m.Encoding != tc.want {
			t.Errorf("%d clusters: encoding %q, %v; want %q", tc.clusters, m.Encoding, err, tc.want)
		}
	}
	// A cluster part over PartSize falls back to the chunked layout.
	huge := bigSnapshot(8, 1)
	huge.Clusters["c0"] = bigSnapshot(1, 16000).Clusters["c0"]
	m, parts, err := snapshot.EncodeStore(huge)
	if err != nil || m.Encoding != snapshot.Encoding || len(parts) < 2 {
		t.Fatalf("huge clusters: encoding %q, %d parts, %v; want %q in parts", m.Encoding, len(parts), err, snapshot.Encoding)
	}
}

func TestBucketCount(t *testing.T) {
	for n, want := range map[int]int{0: 1, 1: 1, 2: 2, 8: 4, 200: 16, 256: 16, 257: 32, 5000: 128, 1 << 20: 256} {
		if got := snapshot.BucketCount(n); got != want {
			t.Errorf("BucketCount(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSplitDecodeRejects(t *testing.T) {
	s := bigSnapshot(40, 2)
	m, st := splitToStore(t, s)
	copyStore := func() store {
		c := store{}
		for k, v := range st {
			c[k] = v
		}
		return c
	}
	bi := snapshot.BucketOf("c3", len(m.Buckets))
	var bucket map[string]string
	{
		zr, _ := gzip.NewReader(bytes.NewReader(st[m.Buckets[bi]]))
		if err := json.NewDecoder(zr).Decode(&bucket); err != nil {
			t.Fatal(err)
		}
	}
	c3 := bucket["c3"]
	// withBucket replaces bucket bi by b (a consistent manifest and store).
	withBucket := func(b map[string]string) (snapshot.Manifest, store) {
		data := gz(t, b)
		st2 := copyStore()
		st2[hexSum(data)] = data
		m2 := m
		m2.Buckets = slices.Clone(m.Buckets)
		m2.Buckets[bi] = hexSum(data)
		return m2, st2
	}
	check := func(t *testing.T, m snapshot.Manifest, st store, want string, is error) {
		t.Helper()
		for name, dec := range map[string]func() (*snapshot.Snapshot, error){
			"Decode":      func() (*snapshot.Snapshot, error) { return snapshot.Decode(m, st.get) },
			"DecodeBatch": func() (*snapshot.Snapshot, error) { return snapshot.DecodeBatch(m, st.many) },
		} {
			got, err := dec()
			if err == nil || got != nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %v, %v; want an error containing %q", name, got, err, want)
			}
			if is != nil && !errors.Is(err, is) {
				t.Fatalf("%s: %v is not %v", name, err, is)
			}
		}
	}
	t.Run("tampered cluster part", func(t *testing.T) {
		bad := copyStore()
		p := bytes.Clone(bad[c3])
		p[len(p)/2] ^= 0xff
		bad[c3] = p
		check(t, m, bad, `cluster "c3" part digest is`, nil)
	})
	t.Run("missing cluster part", func(t *testing.T) {
		bad := copyStore()
		delete(bad, c3)
		check(t, m, bad, `cluster "c3" part (`+c3+`)`, snapshot.ErrMissingPart)
	})
	t.Run("missing bucket", func(t *testing.T) {
		bad := copyStore()
		delete(bad, m.Buckets[bi])
		check(t, m, bad, "bucket "+strconv.Itoa(bi)+" ("+m.Buckets[bi]+")", snapshot.ErrMissingPart)
	})
	t.Run("tampered head", func(t *testing.T) {
		bad := copyStore()
		bad[m.Head] = gz(t, map[string]any{"settings": map[string]any{}})
		check(t, m, bad, "head part digest is", nil)
	})
	t.Run("bucket points at an absent digest", func(t *testing.T) {
		b := maps.Clone(bucket)
		b["c3"] = strings.Repeat("ab", 32)
		m2, st2 := withBucket(b)
		check(t, m2, st2, `cluster "c3" part (`+strings.Repeat("ab", 32)+`)`, snapshot.ErrMissingPart)
	})
	t.Run("bucket points at another cluster's part", func(t *testing.T) {
		b := maps.Clone(bucket)
		for name, d := range bucket {
			if name != "c3" {
				b["c3"] = d
				break
			}
		}
		m2, st2 := withBucket(b)
		check(t, m2, st2, "content hash is", nil)
	})
	t.Run("cluster in the wrong bucket", func(t *testing.T) {
		b := maps.Clone(bucket)
		other := "x"
		for snapshot.BucketOf(other, len(m.Buckets)) == bi {
			other += "x"
		}
		b[other] = c3
		m2, st2 := withBucket(b)
		check(t, m2, st2, `lists cluster "`+other+`", which belongs in bucket`, nil)
	})
	t.Run("bad digest in a bucket", func(t *testing.T) {
		b := maps.Clone(bucket)
		b["c3"] = "../current/BFE1"
		m2, st2 := withBucket(b)
		check(t, m2, st2, `cluster "c3" digest "../current/BFE1" is not 64 lowercase hex digits`, nil)
	})
	t.Run("unknown field in a cluster part", func(t *testing.T) {
		var c map[string]any
		zr, _ := gzip.NewReader(bytes.NewReader(st[c3]))
		if err := json.NewDecoder(zr).Decode(&c); err != nil {
			t.Fatal(err)
		}
		c["surprise"] = 1
		data := gz(t, c)
		b := maps.Clone(bucket)
		b["c3"] = hexSum(data)
		m2, st2 := withBucket(b)
		st2[hexSum(data)] = data
		check(t, m2, st2, `cluster "c3" part: `, nil)
	})
	t.Run("split manifest with inline content", func(t *testing.T) {
		m2 := m
		m2.Inline = []byte{1}
		check(t, m2, st, "a split manifest has inline content", nil)
	})
	t.Run("no buckets", func(t *testing.T) {
		m2 := m
		m2.Buckets = nil
		check(t, m2, st, "split manifest has 0 buckets", nil)
	})
	t.Run("old layout with buckets", func(t *testing.T) {
		m2 := m
		m2.Encoding = snapshot.Encoding
		check(t, m2, st, "has a head or buckets", nil)
	})
}

// DecodeReusing fetches and decodes only the clusters whose part changed,
// and still checks the whole: a bad new part or a wrong meta.hash fails.
func TestDecodeReusing(t *testing.T) {
	s := bigSnapshot(60, 2)
	m1, st := splitToStore(t, s)
	_, d1, err := snapshot.DecodeReusing(m1, st.many, nil)
	if err != nil || d1.Len() != 60 {
		t.Fatalf("first decode: %d clusters held, %v", d1.Len(), err)
	}
	s2 := oneChanged(60, 2, "c42")
	m2, st2 := splitToStore(t, s2)
	var asked []string
	counting := func(ds []string) ([][]byte, error) {
		asked = append(asked, ds...)
		return st2.many(ds)
	}
	got, d2, err := snapshot.DecodeReusing(m2, counting, d1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s2) || d2.Len() != 60 {
		t.Fatalf("reused decode differs from the snapshot (%d clusters held)", d2.Len())
	}
	if n := len(asked) - 1 - len(m2.Buckets); n != 1 {
		t.Fatalf("asked for %d cluster parts, want 1 (c42)", n)
	}
	// A tampered new part is still refused.
	bad := store{}
	for k, v := range st2 {
		bad[k] = v
	}
	c42 := asked[len(asked)-1]
	p := bytes.Clone(bad[c42])
	p[len(p)/2] ^= 0xff
	bad[c42] = p
	if _, _, err := snapshot.DecodeReusing(m2, bad.many, d1); err == nil || !strings.Contains(err.Error(), `cluster "c42" part digest is`) {
		t.Fatalf("tampered part with reuse: %v", err)
	}
	// The content hash covers reused clusters too.
	m3 := m2
	m3.Meta.Hash = strings.Repeat("0", 64)
	if _, _, err := snapshot.DecodeReusing(m3, st2.many, d2); err == nil || !strings.Contains(err.Error(), "content hash is") {
		t.Fatalf("wrong meta.hash with reuse: %v", err)
	}
}

// Explanations live in their own part: a publish whose explanations all
// changed (the planner recomputes them) but whose content changed in one
// cluster still has only that cluster and its bucket new on the proxy's
// side; Decode returns them, DecodeReusing (the proxy's) does not read them.
func TestSplitExplanationsApart(t *testing.T) {
	withEx := func(demand float64, w int) *snapshot.Snapshot {
		s := bigSnapshot(30, 1)
		for name, c := range s.Clusters {
			c.Explanation = &snapshot.Explanation{Mode: "optimal", DemandRPS: demand, Notes: []string{name}}
			if name == "c4" {
				c.Row.Weights = map[string]int{"SC1": w, "SC2": 9000 - w, config.Blackhole: 1000}
			}
			s.Clusters[name] = c
		}
		return s
	}
	s1 := withEx(100, 4500)
	m1, st1 := splitToStore(t, s1)
	got, err := snapshot.Decode(m1, st1.get)
	if err != nil || !reflect.DeepEqual(got, s1) {
		t.Fatalf("Decode with explanations: %v (equal: %v)", err, reflect.DeepEqual(got, s1))
	}
	s2 := withEx(250, 5000)
	s2.Meta.Version = 43
	m2, st2 := splitToStore(t, s2)
	var fresh []string
	for d := range st2 {
		if st1[d] == nil {
			fresh = append(fresh, d)
		}
	}
	if len(fresh) != 3 || !slices.Contains(fresh, m2.Explain) {
		t.Fatalf("%d new parts, want 3 (c4, its bucket, the explanations)", len(fresh))
	}
	_, d1, err := snapshot.DecodeReusing(m1, st1.many, nil)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	proxy, _, err := snapshot.DecodeReusing(m2, func(ds []string) ([][]byte, error) { asked = append(asked, ds...); return st2.many(ds) }, d1)
	if err != nil || slices.Contains(asked, m2.Explain) || proxy.Clusters["c4"].Explanation != nil || proxy.Clusters["c4"].Row.Weights["SC1"] != 5000 {
		t.Fatalf("DecodeReusing: %v; asked for the explanations: %v", err, slices.Contains(asked, m2.Explain))
	}
	refs, err := snapshot.Refs(m2, st2.many)
	if err != nil || !slices.Contains(refs, m2.Explain) {
		t.Fatalf("Refs leaves the explanations part out (%v): part collection would delete it", err)
	}
	// An explanation of a cluster the snapshot does not have is refused.
	bad := gz(t, map[string]any{"nope": map[string]any{"mode": "optimal", "demand_rps": 1}})
	st2[hexSum(bad)] = bad
	m3 := m2
	m3.Explain = hexSum(bad)
	if _, err := snapshot.Decode(m3, st2.get); err == nil || !strings.Contains(err.Error(), `explains cluster "nope"`) {
		t.Fatalf("stray explanation: %v", err)
	}
}
