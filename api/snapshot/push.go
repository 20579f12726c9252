package snapshot

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
)

// Push is what a pointer carries of the version it introduces, so that the
// watch event that delivers the pointer to every proxy also tells each
// proxy what it lacks: the version's manifest, and the parts the publish
// wrote (new to etcd: no proxy holds them) as far as they fit PushLimit —
// the head and the index buckets first (without them a proxy would need a
// round to learn which cluster parts it lacks), then cluster parts, never
// the explanations part (proxies skip it). A proxy that ran the parent
// version then reads nothing more for a change that fits, and one
// transaction of the parts it lacks otherwise: etcd's cost per publish is
// per request, and each proxy made three before (manifest, buckets,
// clusters).
//
// The manifest is also stored under snapshots/<pc>/<version> as before
// (history, lbctl, part collection, proxies that missed the pointer).
// A Push is a hint that must match: a proxy uses it only for the version it
// runs (Pointer.For), checks its meta against the pointer like a stored
// manifest's, and checks every part's digest like a part read from etcd.
type Push struct {
	Manifest Manifest `json:"manifest"`
	// Parts are parts by digest (a subset of what Manifest references).
	Parts map[string][]byte `json:"parts,omitempty"`
}

// PushLimit bounds the JSON of a Push: the bytes every watching proxy
// receives with each pointer (at 200 backend clusters the split manifest is
// ~1.4 KiB, a bucket 0.6–0.9 KiB, a cluster part 0.4–1.1 KiB, base64 in
// JSON ×4/3; issue 20's budget is 4 KiB per proxy for a one-cluster
// change). A manifest that does not fit alone is not pushed.
const PushLimit = 3584

// NewPush is the push for manifest m whose publish wrote the parts fresh
// (the ones etcd lacked), nil when m alone exceeds PushLimit.
func NewPush(m Manifest, fresh []Part) (*Push, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode push: %w", err)
	}
	size := len(`{"manifest":,"parts":{}}`) + len(raw)
	if size > PushLimit {
		return nil, nil
	}
	p := &Push{Manifest: m}
	tree := func(d string) bool { return d == m.Head || slices.Contains(m.Buckets, d) }
	for _, pass := range []func(string) bool{tree, func(d string) bool { return !tree(d) && d != m.Explain }} {
		for _, part := range fresh {
			if !pass(part.Digest) || p.Parts[part.Digest] != nil {
				continue
			}
			// "digest":"base64",
			n := len(part.Digest) + base64.StdEncoding.EncodedLen(len(part.Data)) + 6
			if size+n > PushLimit {
				continue
			}
			if p.Parts == nil {
				p.Parts = map[string][]byte{}
			}
			p.Parts[part.Digest] = part.Data
			size += n
		}
	}
	return p, nil
}

// ManifestFor returns the pushed manifest when it is ptr's version (ok
// false when p is nil or for another version: a candidate's push seen by a
// proxy outside its stage, or a push a pointer move kept). The caller checks
// its meta against ptr as it would a stored manifest's.
func (p *Push) ManifestFor(ptr Pointer) (m Manifest, ok bool) {
	if p == nil || p.Manifest.Meta.Version != ptr.Version {
		return Manifest{}, false
	}
	return p.Manifest, true
}

// Part returns the pushed part with digest d, nil if there is none. Its
// digest is not checked here: decoding checks every part's.
func (p *Push) Part(d string) []byte {
	if p == nil {
		return nil
	}
	return p.Parts[d]
}
