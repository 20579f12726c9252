// Package snapshot is the scheduler's output: everything the proxies of one
// proxy cluster need, whole and versioned. A Snapshot is immutable once
// published; it is stored in etcd as a small Manifest plus content-addressed
// parts (see encode.go) so that any size fits etcd's request limits.
package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// Snapshot is one proxy cluster's complete configuration.
type Snapshot struct {
	Meta Meta `json:"meta"`
	// Settings are proxy-wide options for this proxy cluster.
	Settings Settings `json:"settings"`
	// Products route hosts to clusters.
	Products       map[string]config.Product `json:"products,omitempty"`
	DefaultProduct string                    `json:"default_product,omitempty"`
	// Clusters holds every backend cluster the proxies may route to.
	Clusters map[string]Cluster `json:"clusters,omitempty"`
}

// Meta identifies a snapshot: (Lineage, Version). Version is monotonic per
// proxy cluster within a lineage; a new lineage (a fresh or wiped etcd)
// starts its own history (see lineage.go).
type Meta struct {
	ProxyCluster string `json:"proxy_cluster"`
	// Lineage is the id of the history this snapshot belongs to; "" is the
	// unknown lineage of snapshots written before lineages existed.
	Lineage   string    `json:"lineage,omitempty"`
	Version   uint64    `json:"version"`
	Parent    uint64    `json:"parent,omitempty"`
	Author    string    `json:"author,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Hash is ContentHash of the snapshot: equal content, equal hash.
	Hash string `json:"hash,omitempty"`
	// Inputs are the operator input revisions the snapshot was computed
	// from (nil in snapshots older than this field).
	Inputs *Inputs `json:"inputs,omitempty"`
	// Intents are the operator intents the snapshot includes (pins of this
	// proxy cluster, drains, shifts applied to it), each with who wrote it
	// and why: lbctl history shows them (IntentsFor).
	Intents []Intent `json:"intents,omitempty"`
}

// Inputs are the etcd revisions of the operator inputs behind a snapshot.
type Inputs struct {
	// Desired is the desired state's mod revision (pins and drains included).
	Desired int64 `json:"desired"`
	// Shifts is the mod revision of each shift intent applied to this proxy
	// cluster.
	Shifts map[string]int64 `json:"shifts,omitempty"`
}

// Settings are per proxy cluster options.
type Settings struct {
	// IDC is where this proxy cluster runs.
	IDC string `json:"idc,omitempty"`
	// TrustedProxies are CIDRs whose X-Forwarded-For is believed.
	TrustedProxies []string `json:"trusted_proxies,omitempty"`
}

// Cluster is one backend cluster as this proxy cluster sees it.
type Cluster struct {
	// SubClusters with their instances (static and agent-registered, with
	// agent-reported state). Excluded ones (drained) take no traffic at all.
	SubClusters map[string]config.SubCluster `json:"subclusters"`
	Policy      config.Policy                `json:"policy"`
	// Row is this proxy cluster's weight row for the cluster.
	Row Row `json:"row"`
	// Explanation says how the row was computed; not part of the content hash.
	Explanation *Explanation `json:"explanation,omitempty"`
}

// UnmarshalJSON fills policy defaults first, as config.Cluster does.
func (c *Cluster) UnmarshalJSON(b []byte) error {
	type plain Cluster
	v := plain{Policy: config.DefaultPolicy()}
	if err := config.StrictUnmarshal(b, &v); err != nil {
		return err
	}
	*c = Cluster(v)
	return nil
}

// Row is the weight row of one (proxy cluster, cluster) pair: integers ≥ 0 over
// sub-cluster names and config.Blackhole that sum exactly to Denominator.
type Row struct {
	Denominator int            `json:"denominator"`
	Weights     map[string]int `json:"weights"`
	// Pinned rows were fixed by an operator.
	Pinned bool `json:"pinned,omitempty"`
	// AllowFullDrop permits a blackhole share equal to the denominator.
	AllowFullDrop bool `json:"allow_full_drop,omitempty"`
}

// Explanation records how a row came to be.
type Explanation struct {
	// Mode: "optimal", "capacity-proportional", "pinned", "static".
	Mode string `json:"mode"`
	// DemandRPS is the demand used for this proxy cluster.
	DemandRPS float64 `json:"demand_rps"`
	// CapacityRPS per sub-cluster (after target utilisation).
	CapacityRPS map[string]float64 `json:"capacity_rps,omitempty"`
	// Cost per sub-cluster from this proxy cluster's IDC.
	Cost map[string]int `json:"cost,omitempty"`
	// Optimum is the row before rounding and guardrails, in points of the denominator.
	Optimum map[string]float64 `json:"optimum,omitempty"`
	// Guardrails lists each guardrail that changed the row and how.
	Guardrails []string `json:"guardrails,omitempty"`
	// Utilisation is the projected load / capacity per sub-cluster (all proxy clusters).
	Utilisation map[string]float64 `json:"utilisation,omitempty"`
	// Notes are other facts worth showing (fallbacks, shifts applied).
	Notes []string `json:"notes,omitempty"`
}

// ContentHash is the hex SHA-256 of the snapshot's content: everything but
// the metadata (except the proxy cluster) and the explanations. Two
// snapshots with the same hash route every request the same way, so the
// scheduler does not publish them twice.
//
// It is a two-level (Merkle-style) hash, so that a producer that changed one
// cluster re-hashes that cluster only (see ContentHashFrom):
//
//	ContentHash = SHA-256( "sluice-content-v2\n"
//	                       ‖ JSON{meta:{proxy_cluster}, settings}
//	                       ‖ RoutesHash(products, default_product)
//	                       ‖ for each cluster, by name in byte order:
//	                           uint64-LE len(name) ‖ name ‖ ClusterHash(cluster) )
//
// Every JSON encoding is encoding/json's, which sorts map keys, so equal
// content always gives an equal hash.
func ContentHash(s *Snapshot) string {
	names := make([]string, 0, len(s.Clusters))
	for name := range s.Clusters {
		names = append(names, name)
	}
	slices.Sort(names)
	sums := make([][sha256.Size]byte, len(names))
	for i, name := range names {
		c := s.Clusters[name]
		sums[i] = ClusterHash(&c)
	}
	return ContentHashFrom(s, RoutesHash(s.Products, s.DefaultProduct), names, sums)
}

// ContentHashFrom is ContentHash(s) from precomputed parts, for producers
// that cache them: routes must be RoutesHash(s.Products, s.DefaultProduct),
// names the names of s.Clusters sorted in byte order, and sums[i] the
// ClusterHash of s.Clusters[names[i]]. Neither s.Clusters nor the routes
// are read; parts that do not match s give a hash that matches nothing
// (ContentHash is the reference). It panics if len(names) != len(sums).
func ContentHashFrom(s *Snapshot, routes [sha256.Size]byte, names []string, sums [][sha256.Size]byte) string {
	if len(names) != len(sums) {
		panic("snapshot: ContentHashFrom: names and sums differ in length")
	}
	head := struct {
		Meta     Meta     `json:"meta"`
		Settings Settings `json:"settings"`
	}{Meta: Meta{ProxyCluster: s.Meta.ProxyCluster}, Settings: s.Settings}
	b := mustMarshal(&head)
	n := len(contentHashTag) + len(b) + sha256.Size
	for _, name := range names {
		n += 8 + len(name) + sha256.Size
	}
	buf := make([]byte, 0, n)
	buf = append(buf, contentHashTag...)
	buf = append(buf, b...)
	buf = append(buf, routes[:]...)
	for i, name := range names {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(len(name)))
		buf = append(buf, name...)
		buf = append(buf, sums[i][:]...)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}

// contentHashTag starts every ContentHash input: a new definition of the
// hash gets a new tag.
const contentHashTag = "sluice-content-v2\n"

// RoutesHash is the SHA-256 of the JSON of a snapshot's routes (products
// and default product) as ContentHash uses it.
func RoutesHash(products map[string]config.Product, defaultProduct string) [sha256.Size]byte {
	r := struct {
		Products       map[string]config.Product `json:"products,omitempty"`
		DefaultProduct string                    `json:"default_product,omitempty"`
	}{products, defaultProduct}
	return sha256.Sum256(mustMarshal(&r))
}

// ClusterHash is the SHA-256 of the JSON of c without its explanation: the
// per-cluster part of ContentHash. Equal content gives equal sums.
func ClusterHash(c *Cluster) [sha256.Size]byte {
	cp := *c
	cp.Explanation = nil
	return sha256.Sum256(mustMarshal(&cp))
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every field is a plain value; Marshal cannot fail.
		panic("snapshot: marshal content: " + err.Error())
	}
	return b
}
