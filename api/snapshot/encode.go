package snapshot

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sluicelb/sluice/api/codec"
)

// Storage limits. etcd refuses requests over 1.5 MiB by default, so a part
// is at most PartSize, and a manifest with inline data stays well below it
// (the pointer and manifest are written in one transaction).
const (
	PartSize    = 1 << 20
	InlineLimit = 512 << 10
	// MaxDecoded bounds the JSON a manifest may expand to (a gzip bomb guard).
	MaxDecoded = 512 << 20
	// Encoding is the whole-snapshot layout: one gzip'd JSON document,
	// inline or cut into Parts (EncodingSplit is the per-cluster one).
	Encoding = "json+gzip"
)

// Manifest is the small value stored under the snapshot's key. The content is
// either Inline or split into Parts, each stored under its SHA-256.
type Manifest struct {
	Meta     Meta   `json:"meta"`
	Encoding string `json:"encoding"`
	// Size is the length of the compressed content in bytes.
	Size int `json:"size"`
	// Digest is the hex SHA-256 of the compressed content.
	Digest string `json:"digest"`
	// Inline holds the compressed content when it is at most InlineLimit.
	Inline []byte `json:"inline,omitempty"`
	// Parts are hex SHA-256 digests of the content's parts, in order.
	Parts []string `json:"parts,omitempty"`
	// Head and Buckets are the EncodingSplit layout's (split.go): the
	// digests of the head part and of the index buckets.
	Head    string   `json:"head,omitempty"`
	Buckets []string `json:"buckets,omitempty"`
	// Explain is the split layout's explanations part (cluster name →
	// Explanation), "" when no cluster has one. Proxies skip it.
	Explain string `json:"explain,omitempty"`
}

// Part is one content-addressed piece of a large snapshot.
type Part struct {
	Digest string
	Data   []byte
}

// Pointer is the value of current/<proxyCluster>: which snapshot is live.
// Lineage is "" in pointers written before lineages existed. During a staged
// rollout Candidate names the snapshot the stage's proxies run; Version and
// Hash stay the stable snapshot every other proxy runs (Pointer.For).
type Pointer struct {
	Lineage   string     `json:"lineage,omitempty"`
	Version   uint64     `json:"version"`
	Hash      string     `json:"hash"`
	Candidate *Candidate `json:"candidate,omitempty"`
	// Push is the manifest (and what fits of the new parts) of the version
	// this write introduced (push.go); nil in pointers of earlier releases
	// and when the manifest is too large. A proxy of an earlier release
	// refuses a pointer with a push (strict decoding) and keeps its snapshot.
	Push *Push `json:"push,omitempty"`
}

// Encode turns s into a manifest and the parts that must be stored before it.
// It sets s.Meta.Hash if it is empty.
func Encode(s *Snapshot) (Manifest, []Part, error) {
	if s.Meta.Hash == "" {
		s.Meta.Hash = ContentHash(s)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("encode snapshot: %w", err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := zw.Write(raw); err != nil {
		return Manifest{}, nil, fmt.Errorf("compress snapshot: %w", err)
	}
	if err := zw.Close(); err != nil {
		return Manifest{}, nil, fmt.Errorf("compress snapshot: %w", err)
	}
	data := buf.Bytes()
	m := Manifest{Meta: s.Meta, Encoding: Encoding, Size: len(data), Digest: digest(data)}
	if len(data) <= InlineLimit {
		m.Inline = data
		return m, nil, nil
	}
	var parts []Part
	for off := 0; off < len(data); off += PartSize {
		end := min(off+PartSize, len(data))
		chunk := bytes.Clone(data[off:end])
		p := Part{Digest: digest(chunk), Data: chunk}
		parts = append(parts, p)
		m.Parts = append(m.Parts, p.Digest)
	}
	return m, parts, nil
}

// ErrMissingPart is returned (wrapped) when a referenced part cannot be fetched.
var ErrMissingPart = errors.New("snapshot part missing")

// Decode rebuilds a snapshot from its manifest, fetching parts with get. It
// checks every digest, the content hash and strict JSON decoding; it does not
// run the semantic validator (api/validate).
//
// It is the one decoder of stored snapshots: both layouts (Encoding and
// EncodingSplit) are read here.
func Decode(m Manifest, get func(digest string) ([]byte, error)) (*Snapshot, error) {
	if m.Encoding == EncodingSplit {
		return decodeSplit(m, one(get))
	}
	if m.Encoding != Encoding {
		return nil, fmt.Errorf("decode snapshot: encoding %q is neither %q nor %q", m.Encoding, Encoding, EncodingSplit)
	}
	if m.Head != "" || len(m.Buckets) > 0 {
		return nil, fmt.Errorf("decode snapshot: a %q manifest has a head or buckets", Encoding)
	}
	var data []byte
	switch {
	case len(m.Inline) > 0 && len(m.Parts) > 0:
		return nil, errors.New("decode snapshot: manifest has both inline content and parts")
	case len(m.Inline) > 0:
		data = m.Inline
	default:
		if len(m.Parts) == 0 {
			return nil, errors.New("decode snapshot: manifest has no content")
		}
		buf := make([]byte, 0, m.Size)
		for i, d := range m.Parts {
			p, err := get(d)
			if err != nil {
				return nil, fmt.Errorf("decode snapshot: part %d (%s): %w", i, d, err)
			}
			if got := digest(p); got != d {
				return nil, fmt.Errorf("decode snapshot: part %d digest is %s, want %s", i, got, d)
			}
			buf = append(buf, p...)
		}
		data = buf
	}
	if len(data) != m.Size {
		return nil, fmt.Errorf("decode snapshot: content is %d bytes, manifest says %d", len(data), m.Size)
	}
	if got := digest(data); got != m.Digest {
		return nil, fmt.Errorf("decode snapshot: content digest is %s, manifest says %s", got, m.Digest)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, MaxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: decompress: %w", err)
	}
	if len(raw) > MaxDecoded {
		return nil, fmt.Errorf("decode snapshot: content exceeds %d bytes", MaxDecoded)
	}
	s, err := Unmarshal(raw)
	if err != nil {
		return nil, err
	}
	if s.Meta.Version != m.Meta.Version || s.Meta.ProxyCluster != m.Meta.ProxyCluster || s.Meta.Lineage != m.Meta.Lineage {
		return nil, fmt.Errorf("decode snapshot: content is %s, manifest says %s", s.Meta.ID(), m.Meta.ID())
	}
	if h := ContentHash(s); h != s.Meta.Hash {
		return nil, fmt.Errorf("decode snapshot: content hash is %s, meta.hash says %s", h, s.Meta.Hash)
	}
	return s, nil
}

// Unmarshal strictly decodes one snapshot document (JSON): unknown fields,
// duplicate keys and wrong types are errors.
func Unmarshal(raw []byte) (*Snapshot, error) {
	var s Snapshot
	if err := codec.UnmarshalJSON(raw, &s); err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	return &s, nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
