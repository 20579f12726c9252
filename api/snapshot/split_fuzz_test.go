package snapshot_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/sluicelb/sluice/api/snapshot"
)

// FuzzDecodeSplit feeds the split layout's part decoders what a peer
// writing etcd could store: the fuzzer's bytes become the decompressed
// content of the head part, of a bucket, or of a cluster part, with every
// digest above it rewritten so that the part is reached (parts are
// content-addressed: a part that does not match its digest never gets past
// fetchVerified). Decoding must not panic; what it accepts must carry the
// manifest's meta; and DecodeReusing, given the decode of the unmodified
// snapshot, must give the same answer as a fresh decode — reused clusters
// must never change what a snapshot decodes to.
func FuzzDecodeSplit(f *testing.F) {
	base := bigSnapshot(12, 2)
	m0, st0 := splitToStore(f, base)
	_, prev, err := snapshot.DecodeReusing(m0, st0.many, nil)
	if err != nil {
		f.Fatal(err)
	}
	unzip := func(b []byte) []byte {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			f.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := out.ReadFrom(zr); err != nil {
			f.Fatal(err)
		}
		return out.Bytes()
	}
	// Seeds: each target's real content, and a few near misses.
	f.Add(byte(0), unzip(st0[m0.Head]))
	f.Add(byte(1), unzip(st0[m0.Buckets[0]]))
	var bucket0 map[string]string
	if err := json.Unmarshal(unzip(st0[m0.Buckets[0]]), &bucket0); err != nil {
		f.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range bucket0 {
			if !yield(n) {
				return
			}
		}
	})
	if len(names) == 0 {
		f.Fatal("bucket 0 of the seed snapshot is empty")
	}
	f.Add(byte(2), unzip(st0[bucket0[names[0]]]))
	f.Add(byte(1), []byte(`{"no-such-cluster":"00"}`))
	f.Add(byte(2), []byte(`{"subclusters":{},"row":{"denominator":0}}`))
	f.Add(byte(0), []byte(`{"settings":{},"unknown":1}`))

	f.Fuzz(func(t *testing.T, which byte, content []byte) {
		m := m0
		m.Buckets = slices.Clone(m0.Buckets)
		st := store{}
		for d, b := range st0 {
			st[d] = b
		}
		put := func(raw []byte) string {
			b := gzipBytes(t, raw)
			d := hexSum(b)
			st[d] = b
			return d
		}
		switch which % 3 {
		case 0:
			m.Head = put(content)
		case 1:
			m.Buckets[0] = put(content)
		case 2:
			b := map[string]string{}
			for n, d := range bucket0 {
				b[n] = d
			}
			b[names[0]] = put(content)
			raw, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			m.Buckets[0] = put(raw)
		}
		s, err := snapshot.DecodeBatch(m, st.many)
		s2, _, err2 := snapshot.DecodeReusing(m, st.many, prev)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("fresh decode: %v; reusing the previous decode: %v", err, err2)
		}
		if err != nil {
			return
		}
		if !reflect.DeepEqual(s.Meta, m.Meta) {
			t.Fatalf("decoded meta %+v, manifest says %+v", s.Meta, m.Meta)
		}
		a, _ := json.Marshal(s)
		b, _ := json.Marshal(s2)
		if !bytes.Equal(a, b) {
			t.Fatalf("a fresh decode and one reusing the previous clusters differ:\n%s\n%s", a, b)
		}
	})
}

// gzipBytes compresses raw as the publisher does.
func gzipBytes(t testing.TB, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
