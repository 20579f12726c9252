package snapshot

import (
	"fmt"
	"hash/fnv"
	"slices"
)

// Candidate is the snapshot a staged rollout's current stage runs, and which
// proxies are in the stage: those whose id is in IDs, or whose id hashes
// below Percent (ProxyHash), or all of them (All). Proxies decide from their
// own id; nothing is written per proxy.
type Candidate struct {
	// Version and Hash of the candidate snapshot, in the pointer's lineage.
	Version uint64 `json:"version"`
	Hash    string `json:"hash"`
	// Rollout and Stage identify the rollout and its stage (from 0).
	Rollout string `json:"rollout"`
	Stage   int    `json:"stage"`
	// Selection of the stage's proxies (any that matches selects).
	All     bool     `json:"all,omitempty"`
	Percent float64  `json:"percent,omitempty"`
	IDs     []string `json:"ids,omitempty"`
}

// ProxyHash places a proxy id on [0, 100): a percent stage selects the
// proxies below its percent, a count stage the first ones in this order.
func ProxyHash(id string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return float64(h.Sum64()%1_000_000) / 10_000
}

// Selects reports whether proxy id is in the stage.
func (c *Candidate) Selects(id string) bool {
	if c == nil {
		return false
	}
	return c.All || (c.Percent > 0 && ProxyHash(id) < c.Percent) || slices.Contains(c.IDs, id)
}

// For is the snapshot proxy id runs: the candidate when its stage selects
// the proxy, else the stable one. The result has no Candidate and no Push
// (it compares with ==).
func (p Pointer) For(id string) Pointer {
	if p.Candidate.Selects(id) {
		return Pointer{Lineage: p.Lineage, Version: p.Candidate.Version, Hash: p.Candidate.Hash}
	}
	return Pointer{Lineage: p.Lineage, Version: p.Version, Hash: p.Hash}
}

// CheckCandidate checks that a candidate is newer than the stable version.
func (p Pointer) CheckCandidate() error {
	c := p.Candidate
	if c == nil {
		return nil
	}
	if c.Version <= p.Version {
		return fmt.Errorf("candidate version %d is not above the stable version %d", c.Version, p.Version)
	}
	if c.Hash == "" {
		return fmt.Errorf("candidate version %d has no hash", c.Version)
	}
	return nil
}
