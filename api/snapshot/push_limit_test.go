package snapshot_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/snapshot"
)

// pushSize is NewPush's count for m without parts.
func pushSize(t *testing.T, m snapshot.Manifest) int {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return len(`{"manifest":,"parts":{}}`) + len(raw)
}

// padded is m with a reason that makes pushSize exactly size.
func padded(t *testing.T, m snapshot.Manifest, size int) snapshot.Manifest {
	t.Helper()
	m.Meta.Reason = "r" // the field is left out when empty
	m.Meta.Reason = strings.Repeat("r", 1+size-pushSize(t, m))
	if got := pushSize(t, m); got != size {
		t.Fatalf("padding: size %d, want %d", got, size)
	}
	return m
}

// PushLimit is inclusive: a push of exactly PushLimit bytes (as NewPush
// counts them) is made, one byte more is not — for the manifest alone and
// for a part; and the count never undercounts the JSON.
func TestPushLimitIsInclusive(t *testing.T) {
	head := strings.Repeat("a", 64)
	base := snapshot.Manifest{Meta: snapshot.Meta{ProxyCluster: "BFE1", Version: 2}, Encoding: "split", Digest: strings.Repeat("b", 64), Head: head}
	if p, err := snapshot.NewPush(padded(t, base, snapshot.PushLimit), nil); err != nil || p == nil {
		t.Fatalf("manifest of exactly PushLimit: %v, %v; want a push", p, err)
	}
	if p, err := snapshot.NewPush(padded(t, base, snapshot.PushLimit+1), nil); err != nil || p != nil {
		t.Fatalf("manifest one byte over: %v, %v; want none", p, err)
	}
	data := make([]byte, 300)                                                 // base64: 400 bytes
	n := len(head) + base64.StdEncoding.EncodedLen(len(data)) + len(`"":"",`) // the part's share
	part := []snapshot.Part{{Digest: head, Data: data}}
	for _, c := range []struct {
		size int
		in   bool
	}{{snapshot.PushLimit - n, true}, {snapshot.PushLimit - n + 1, false}} {
		m := padded(t, base, c.size)
		p, err := snapshot.NewPush(m, part)
		if err != nil || p == nil {
			t.Fatalf("manifest of %d: %v, %v", c.size, p, err)
		}
		if got := p.Part(head) != nil; got != c.in {
			t.Fatalf("manifest of %d with a part of %d: part pushed %v, want %v", c.size, n, got, c.in)
		}
		raw, err := json.Marshal(p)
		if err != nil || len(raw) > snapshot.PushLimit {
			t.Fatalf("manifest of %d: push JSON %d bytes (%v), over PushLimit %d", c.size, len(raw), err, snapshot.PushLimit)
		}
	}
}
