package codec

import (
	"encoding/json"
)

// Kind is what a Sluice document is.
type Kind int

const (
	// KindState is a desired-state document (config.State).
	KindState Kind = iota
	// KindSnapshot is a snapshot document (snapshot.Snapshot).
	KindSnapshot
)

func (k Kind) String() string {
	if k == KindSnapshot {
		return "snapshot"
	}
	return "desired state"
}

// KindOf tells a snapshot from a desired-state document, j being JSON (see
// ToJSON): a snapshot is an object with a top-level "meta" and no
// "topology"; anything else is read as a desired state, whose strict
// decoding then says what is wrong with it. lbctl and the proxy's file
// source tell the two apart by this one rule.
func KindOf(j []byte) Kind {
	var top map[string]json.RawMessage
	if json.Unmarshal(j, &top) != nil {
		return KindState
	}
	_, meta := top["meta"]
	_, topo := top["topology"]
	if meta && !topo {
		return KindSnapshot
	}
	return KindState
}
