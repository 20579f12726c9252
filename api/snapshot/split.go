package snapshot

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
)

// EncodingSplit is the per-cluster layout ("a change costs what it changes").
// The content is a tree of content-addressed parts, each gzip'd JSON:
//
//	manifest ─ Head:    {settings, products, default_product}
//	         └ Buckets: bucket i = {cluster name: cluster part digest} for the
//	                    clusters with BucketOf(name, len(Buckets)) == i
//	                    └ cluster part = one Cluster without its explanation
//	                      (sub-clusters, policy, row)
//	         └ Explain: {cluster name: explanation} (one part; proxies skip it)
//
// Explanations are apart because the planner recomputes them (demand) for
// every cluster at every plan: in the cluster parts they would change every
// part at every publish.
// A reader that kept the parts of any earlier version by digest fetches only
// the manifest, the buckets whose digest changed and the clusters whose
// digest changed. Meta lives in the manifest only, so parts are shared
// across versions (and across proxy clusters with equal content).
const EncodingSplit = "json+gzip/split"

// Split layout limits.
const (
	// SplitMinClusters: snapshots with fewer clusters are stored in the
	// Encoding layout (inline when small: one read for everything); a split
	// one costs at least four reads at a proxy's first sync.
	SplitMinClusters = 8
	// MaxBuckets bounds a split manifest's index (BucketCount).
	MaxBuckets = 256
)

// EncodeStore encodes s as the publisher stores it: EncodingSplit when it
// has at least SplitMinClusters clusters and every part fits PartSize,
// Encoding otherwise. It sets s.Meta.Hash if it is empty.
func EncodeStore(s *Snapshot) (Manifest, []Part, error) {
	if len(s.Clusters) >= SplitMinClusters {
		m, parts, err := EncodeSplit(s)
		if err != nil {
			return Manifest{}, nil, err
		}
		if !slices.ContainsFunc(parts, func(p Part) bool { return len(p.Data) > PartSize }) {
			return m, parts, nil
		}
	}
	return Encode(s)
}

// splitHead is the head part: everything but meta and clusters.
type splitHead struct {
	Settings       Settings                  `json:"settings"`
	Products       map[string]config.Product `json:"products,omitempty"`
	DefaultProduct string                    `json:"default_product,omitempty"`
}

// BucketCount is the number of index buckets for n clusters: the smallest
// power of two ≥ √n (so that the manifest and one bucket are about the same
// size), at most MaxBuckets.
func BucketCount(n int) int {
	b := 1
	for b < MaxBuckets && b*b < n {
		b *= 2
	}
	return b
}

// BucketOf is the index bucket of a cluster name among n buckets (FNV-1a).
func BucketOf(name string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % uint32(n))
}

// EncodeSplit encodes s in the EncodingSplit layout: the manifest and its
// parts (each digest once). It sets s.Meta.Hash if it is empty.
func EncodeSplit(s *Snapshot) (Manifest, []Part, error) {
	if s.Meta.Hash == "" {
		s.Meta.Hash = ContentHash(s)
	}
	var parts []Part
	seen := map[string]bool{}
	add := func(what string, v any) (string, error) {
		data, err := gzipJSON(v)
		if err != nil {
			return "", fmt.Errorf("encode snapshot: %s: %w", what, err)
		}
		d := digest(data)
		if !seen[d] {
			seen[d] = true
			parts = append(parts, Part{Digest: d, Data: data})
		}
		return d, nil
	}
	m := Manifest{Meta: s.Meta, Encoding: EncodingSplit}
	var err error
	if m.Head, err = add("head", &splitHead{Settings: s.Settings, Products: s.Products, DefaultProduct: s.DefaultProduct}); err != nil {
		return Manifest{}, nil, err
	}
	n := BucketCount(len(s.Clusters))
	buckets := make([]map[string]string, n)
	for i := range buckets {
		buckets[i] = map[string]string{}
	}
	explain := map[string]*Explanation{}
	for name, c := range s.Clusters {
		if c.Explanation != nil {
			explain[name] = c.Explanation
			c.Explanation = nil
		}
		d, err := add("cluster "+name, &c)
		if err != nil {
			return Manifest{}, nil, err
		}
		buckets[BucketOf(name, n)][name] = d
	}
	if len(explain) > 0 {
		if m.Explain, err = add("explanations", explain); err != nil {
			return Manifest{}, nil, err
		}
	}
	m.Buckets = make([]string, n)
	for i, b := range buckets {
		if m.Buckets[i], err = add(fmt.Sprintf("bucket %d", i), b); err != nil {
			return Manifest{}, nil, err
		}
	}
	return m, parts, nil
}

var gzipPool = sync.Pool{New: func() any {
	zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return zw
}}

func gzipJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzipPool.Get().(*gzip.Writer)
	defer gzipPool.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gunzipPool holds gzip readers for parts (a reader allocates ~40 KB).
var gunzipPool sync.Pool

// GetMany fetches parts by digest, for DecodeBatch: out[i] is the part of
// digests[i], nil when it does not exist (an error is for failing to ask).
type GetMany func(digests []string) ([][]byte, error)

// one adapts a one-part reader (Decode's) to GetMany.
func one(get func(digest string) ([]byte, error)) GetMany {
	return func(ds []string) ([][]byte, error) {
		out := make([][]byte, len(ds))
		for i, d := range ds {
			b, err := get(d)
			switch {
			case errors.Is(err, ErrMissingPart):
			case err != nil:
				return nil, fmt.Errorf("part %s: %w", d, err)
			default:
				out[i] = b
			}
		}
		return out, nil
	}
}

// DecodeBatch is Decode with a batch part reader: a split snapshot is read
// in two rounds (head and buckets, then clusters), each one call of get.
func DecodeBatch(m Manifest, get GetMany) (*Snapshot, error) {
	if m.Encoding != EncodingSplit {
		return Decode(m, func(d string) ([]byte, error) {
			b, err := get([]string{d})
			if err != nil {
				return nil, err
			}
			if len(b) != 1 || b[0] == nil {
				return nil, ErrMissingPart
			}
			return b[0], nil
		})
	}
	return decodeSplit(m, get)
}

// splitTree is the verified index of a split manifest.
type splitTree struct {
	head     []byte
	explain  []byte            // nil when skipped or absent
	clusters map[string]string // name → digest
	budget   int               // decoded bytes left (MaxDecoded)
}

// fetchVerified gets ds and checks each digest; what names each part.
func fetchVerified(get GetMany, ds []string, what func(i int) string) ([][]byte, error) {
	bs, err := get(ds)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	if len(bs) != len(ds) {
		return nil, fmt.Errorf("decode snapshot: asked for %d parts, got %d", len(ds), len(bs))
	}
	for i, b := range bs {
		if b == nil {
			return nil, fmt.Errorf("decode snapshot: %s (%s): %w", what(i), ds[i], ErrMissingPart)
		}
		if got := digest(b); got != ds[i] {
			return nil, fmt.Errorf("decode snapshot: %s digest is %s, want %s", what(i), got, ds[i])
		}
	}
	return bs, nil
}

func (t *splitTree) gunzip(what string, data []byte, v any) error {
	zr, _ := gunzipPool.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = zr.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return fmt.Errorf("decode snapshot: %s: %w", what, err)
	}
	defer gunzipPool.Put(zr)
	raw, err := io.ReadAll(io.LimitReader(zr, int64(t.budget)+1))
	if err != nil {
		return fmt.Errorf("decode snapshot: %s: decompress: %w", what, err)
	}
	if len(raw) > t.budget {
		return fmt.Errorf("decode snapshot: content exceeds %d bytes", MaxDecoded)
	}
	t.budget -= len(raw)
	if err := codec.UnmarshalJSON(raw, v); err != nil {
		return fmt.Errorf("decode snapshot: %s: %w", what, err)
	}
	return nil
}

// readTree checks a split manifest and reads its head and buckets.
func readTree(m Manifest, get GetMany, withExplain bool) (*splitTree, error) {
	if len(m.Inline) > 0 || len(m.Parts) > 0 || m.Size != 0 || m.Digest != "" {
		return nil, errors.New("decode snapshot: a split manifest has inline content, parts, size or digest")
	}
	if n := len(m.Buckets); n < 1 || n > MaxBuckets {
		return nil, fmt.Errorf("decode snapshot: split manifest has %d buckets, want 1 to %d", n, MaxBuckets)
	}
	ds := append([]string{m.Head}, m.Buckets...)
	if m.Explain != "" {
		ds = append(ds, m.Explain)
	}
	for i, d := range ds {
		if !validDigest(d) {
			return nil, fmt.Errorf("decode snapshot: %s digest %q is not 64 lowercase hex digits", treeName(m, i), d)
		}
	}
	if m.Explain != "" && !withExplain {
		ds = ds[:len(ds)-1]
	}
	bs, err := fetchVerified(get, ds, func(i int) string { return treeName(m, i) })
	if err != nil {
		return nil, err
	}
	t := &splitTree{head: bs[0], clusters: map[string]string{}, budget: MaxDecoded}
	if len(bs) > 1+len(m.Buckets) {
		t.explain = bs[len(bs)-1]
	}
	for i, b := range bs[1 : 1+len(m.Buckets)] {
		var bucket map[string]string
		if err := t.gunzip(treeName(m, i+1), b, &bucket); err != nil {
			return nil, err
		}
		for name, d := range bucket {
			if BucketOf(name, len(m.Buckets)) != i {
				return nil, fmt.Errorf("decode snapshot: %s lists cluster %q, which belongs in bucket %d", treeName(m, i+1), name, BucketOf(name, len(m.Buckets)))
			}
			if !validDigest(d) {
				return nil, fmt.Errorf("decode snapshot: %s: cluster %q digest %q is not 64 lowercase hex digits", treeName(m, i+1), name, d)
			}
			t.clusters[name] = d
		}
	}
	return t, nil
}

// treeName names the i-th part readTree reads: head, buckets, explanations.
func treeName(m Manifest, i int) string {
	switch {
	case i == 0:
		return "head part"
	case i > len(m.Buckets):
		return "explanations part"
	}
	return fmt.Sprintf("bucket %d", i-1)
}

func decodeSplit(m Manifest, get GetMany) (*Snapshot, error) {
	s, _, err := decodeSplitReusing(m, get, nil, true)
	return s, err
}

// Decoded holds the decoded cluster parts of a split snapshot by digest
// (with their ClusterHash), for DecodeReusing. Its clusters are shared with
// the snapshots decoded from it: snapshots are immutable.
type Decoded struct {
	clusters map[string]decodedCluster
}

type decodedCluster struct {
	c    Cluster
	sum  [32]byte
	size int // decoded JSON bytes, counted against MaxDecoded
}

// Len is the number of decoded clusters held.
func (d *Decoded) Len() int {
	if d == nil {
		return 0
	}
	return len(d.clusters)
}

// DecodeReusing is DecodeBatch for a proxy, which decodes version after
// version and needs no explanations: the split layout's explanations part
// is not read (its clusters have no Explanation); clusters whose part digest is in prev (the previous decode's
// result) are taken from it, neither fetched nor decoded again — their
// digests were checked when they were decoded —, and only the others are.
// The content hash is still checked over the whole assembled snapshot. It
// returns the Decoded of this snapshot (nil for the whole layout), for the
// next call; prev may be nil.
func DecodeReusing(m Manifest, get GetMany, prev *Decoded) (*Snapshot, *Decoded, error) {
	if m.Encoding != EncodingSplit {
		s, err := DecodeBatch(m, get)
		return s, nil, err
	}
	return decodeSplitReusing(m, get, prev, false)
}

func decodeSplitReusing(m Manifest, get GetMany, prev *Decoded, withExplain bool) (*Snapshot, *Decoded, error) {
	t, err := readTree(m, get, withExplain)
	if err != nil {
		return nil, nil, err
	}
	var head splitHead
	if err := t.gunzip("head part", t.head, &head); err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(t.clusters))
	for name := range t.clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	next := &Decoded{clusters: make(map[string]decodedCluster, len(names))}
	var fetch []string // digests to fetch and decode
	var fetchNames []string
	asked := map[string]bool{}
	for _, name := range names {
		d := t.clusters[name]
		if dc, ok := prev.get(d); ok {
			if dc.size > t.budget {
				return nil, nil, fmt.Errorf("decode snapshot: content exceeds %d bytes", MaxDecoded)
			}
			t.budget -= dc.size
			next.clusters[d] = dc
		} else if !asked[d] {
			asked[d] = true
			fetch = append(fetch, d)
			fetchNames = append(fetchNames, name)
		}
	}
	what := func(i int) string { return fmt.Sprintf("cluster %q part", fetchNames[i]) }
	bs, err := fetchVerified(get, fetch, what)
	if err != nil {
		return nil, nil, err
	}
	for i, b := range bs {
		var c Cluster
		before := t.budget
		if err := t.gunzip(what(i), b, &c); err != nil {
			return nil, nil, err
		}
		next.clusters[fetch[i]] = decodedCluster{c: c, sum: ClusterHash(&c), size: before - t.budget}
	}
	s := &Snapshot{Meta: m.Meta, Settings: head.Settings, Products: head.Products, DefaultProduct: head.DefaultProduct}
	if len(names) > 0 {
		s.Clusters = make(map[string]Cluster, len(names))
	}
	sums := make([][32]byte, len(names))
	for i, name := range names {
		dc := next.clusters[t.clusters[name]]
		s.Clusters[name] = dc.c
		sums[i] = dc.sum
	}
	if h := ContentHashFrom(s, RoutesHash(s.Products, s.DefaultProduct), names, sums); h != s.Meta.Hash {
		return nil, nil, fmt.Errorf("decode snapshot: content hash is %s, meta.hash says %s", h, s.Meta.Hash)
	}
	if t.explain != nil {
		var ex map[string]*Explanation
		if err := t.gunzip("explanations part", t.explain, &ex); err != nil {
			return nil, nil, err
		}
		for name, e := range ex {
			c, ok := s.Clusters[name]
			if !ok || e == nil {
				return nil, nil, fmt.Errorf("decode snapshot: explanations part explains cluster %q, which the snapshot does not have (or explains it with null)", name)
			}
			c.Explanation = e
			s.Clusters[name] = c
		}
	}
	return s, next, nil
}

func (d *Decoded) get(digest string) (decodedCluster, bool) {
	if d == nil {
		return decodedCluster{}, false
	}
	dc, ok := d.clusters[digest]
	return dc, ok
}

// Refs returns the digest of every part m references: its Parts, or for a
// split manifest its head, its buckets and every cluster they list (the
// buckets are read with get and verified). Part collection keeps them.
func Refs(m Manifest, get GetMany) ([]string, error) {
	if m.Encoding != EncodingSplit {
		return m.Parts, nil
	}
	t, err := readTree(m, get, false)
	if err != nil {
		return nil, err
	}
	out := append([]string{m.Head}, m.Buckets...)
	if m.Explain != "" {
		out = append(out, m.Explain)
	}
	for _, d := range t.clusters {
		out = append(out, d)
	}
	return out, nil
}

// PartsOf encodes s in the split layout and returns its parts by digest: a
// reader that holds a whole snapshot (a proxy's disk cache) seeds its part
// cache with them, so that its first fetch reads only what changed.
func PartsOf(s *Snapshot) map[string][]byte {
	cp := *s
	_, parts, err := EncodeSplit(&cp)
	if err != nil {
		return nil
	}
	out := make(map[string][]byte, len(parts))
	for _, p := range parts {
		out[p.Digest] = p.Data
	}
	return out
}

func validDigest(d string) bool {
	return len(d) == 64 && strings.Trim(d, "0123456789abcdef") == ""
}
