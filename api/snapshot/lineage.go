package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"
)

// A lineage is one history of snapshots: the versions published into one
// etcd since its prefix was first used. The scheduler mints a lineage when
// it finds the prefix without a lineage record (a fresh or wiped etcd) and
// stamps its id on every manifest and pointer, so a snapshot's identity is
// (lineage, version). Versions compare only within a lineage: a proxy never
// applies an older version of its own lineage (I1), and follows a pointer of
// another lineage whatever its version (the old history is gone).

// LineageRecord is the value of keys.Layout.Lineage.
type LineageRecord struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// CreatedBy names the scheduler that minted it, e.g. "lbscheduler/S1".
	CreatedBy string `json:"created_by,omitempty"`
}

// maxLineageLen bounds a lineage id (it appears in logs, statuses and metrics).
const maxLineageLen = 64

// LineagePattern describes valid lineage ids, for error messages and docs.
const LineagePattern = "1..64 characters of A-Z a-z 0-9 . _ -"

// NewLineageID returns a fresh lineage id: the UTC time it was minted and
// 32 random bits, e.g. "20261201T090312Z-3fa9c2d1". Ids sort by age, but
// nothing relies on that: lineages are only ever compared for equality.
func NewLineageID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// ValidLineage reports whether id may be a lineage id. "" is valid: it is
// the unknown lineage of snapshots and pointers older than lineages.
func ValidLineage(id string) error {
	if len(id) > maxLineageLen {
		return fmt.Errorf("lineage %q… is %d characters; want %s", id[:maxLineageLen], len(id), LineagePattern)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("lineage %q has %q at %d; want %s", id, rune(c), i, LineagePattern)
		}
	}
	return nil
}

// LineageName is how logs and tables show a lineage: the id, or "unknown".
func LineageName(id string) string {
	if id == "" {
		return "unknown"
	}
	return id
}

// ID is the snapshot's identity for messages, e.g. "BFE1 v7 (lineage L)".
func (m Meta) ID() string {
	return fmt.Sprintf("%s v%d (lineage %s)", m.ProxyCluster, m.Version, LineageName(m.Lineage))
}
