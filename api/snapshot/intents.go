package snapshot

import (
	"sort"

	"github.com/sluicelb/sluice/api/config"
)

// Intent kinds.
const (
	IntentPin   = "pin"
	IntentDrain = "drain"
	IntentShift = "shift"
)

// Intent is one operator intent a snapshot includes.
type Intent struct {
	Kind string `json:"kind"` // IntentPin, IntentDrain or IntentShift
	// Object names it: "demo-main" (pin of this proxy cluster's row),
	// "demo-main/SC1" (drain), the shift id.
	Object string `json:"object"`
	Author string `json:"author,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// String is e.g. "drain demo-main/SC1".
func (i Intent) String() string { return i.Kind + " " + i.Object }

// IntentsFor lists the intents of st and shifts that proxy cluster pc's
// snapshot includes: its pins, every drain, and the shifts of pc. Sorted by
// kind then object.
func IntentsFor(st *config.State, shifts []config.Shift, pc string) []Intent {
	var out []Intent
	if st != nil {
		for _, p := range st.Pins {
			if p.ProxyCluster == pc {
				out = append(out, Intent{Kind: IntentPin, Object: p.Cluster, Author: p.Author, Reason: p.Reason})
			}
		}
		for _, d := range st.Drains {
			out = append(out, Intent{Kind: IntentDrain, Object: d.Cluster + "/" + d.SubCluster, Author: d.Author, Reason: d.Reason})
		}
	}
	for _, s := range shifts {
		if s.ProxyCluster == pc {
			out = append(out, Intent{Kind: IntentShift, Object: s.ID, Author: s.Author, Reason: s.Reason})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Object < out[j].Object
	})
	return out
}
