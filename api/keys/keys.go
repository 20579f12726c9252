// Package keys is the only place etcd key strings are built and parsed.
//
// Layout under the prefix (default /sluice):
//
//	desired                                   desired state (operator, CAS)
//	shifts/<id>                               shift intent (operator, CAS)
//	shift-progress/<id>                       shift progress (scheduler)
//	instances/<cluster>/<subcluster>/<ip:port> agent registration + health (lease)
//	demand/<proxyCluster>/<proxyID>           proxy demand report (lease)
//	status/<proxyCluster>/<proxyID>           proxy status (lease)
//	last-seen/<proxyCluster>/<proxyID>        copy of the last status (no lease: GONE proxies)
//	snapshots/<proxyCluster>/<version>        snapshot manifest (immutable)
//	parts/<sha256>                            snapshot content part (immutable)
//	current/<proxyCluster>                    pointer to the live snapshot (and a staged rollout's candidate)
//	rollouts/<proxyCluster>                   staged rollout record (scheduler)
//	rollout-ops/<proxyCluster>                operator's promote/pause/resume/abort/retry (lbctl)
//	lineage                                   lineage of every snapshot under the prefix (scheduler)
//	election                                  scheduler leader election prefix
//	leader                                    scheduler leader info (lease)
//	scheduler-status                          the leader's publish results (leader's lease)
//
// Names (clusters, sub-clusters, proxy clusters, proxy ids, shift ids) match
// NamePattern; anything else — "..", NUL, slashes, very long names — is
// rejected before it reaches a key, a file path or a metric label.
package keys

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "/sluice"

// MaxNameLen bounds every name used in a key.
const MaxNameLen = 128

// NamePattern describes valid names, for error messages and docs.
const NamePattern = "1..128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit"

// ValidName reports whether s may be used as a name in keys.
func ValidName(s string) error {
	if s == "" {
		return fmt.Errorf("name is empty; want %s", NamePattern)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("name is %d characters; want %s", len(s), NamePattern)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("name %q has %q at %d; want %s", truncate(s), rune(c), i, NamePattern)
		}
	}
	if strings.Contains(s, "..") {
		return fmt.Errorf("name %q contains \"..\"; want %s", truncate(s), NamePattern)
	}
	return nil
}

// Layout builds and parses keys under one prefix.
type Layout struct {
	prefix string // no trailing slash
}

// New returns the layout for prefix ("" means DefaultPrefix). The prefix must
// start with "/" and be made of valid names separated by "/".
func New(prefix string) (Layout, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasPrefix(prefix, "/") {
		return Layout{}, fmt.Errorf("prefix %q must start with \"/\"", truncate(prefix))
	}
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return Layout{}, fmt.Errorf("prefix %q has no name after \"/\"; want e.g. %s", truncate(prefix), DefaultPrefix)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if err := ValidName(seg); err != nil {
			return Layout{}, fmt.Errorf("prefix %q: %w", truncate(prefix), err)
		}
	}
	return Layout{prefix: p}, nil
}

// MustNew is New for constants known to be valid; it panics otherwise.
func MustNew(prefix string) Layout {
	l, err := New(prefix)
	if err != nil {
		panic(err)
	}
	return l
}

// Prefix returns the prefix without a trailing slash.
func (l Layout) Prefix() string { return l.prefix }

// Root returns the prefix with a trailing slash: every Sluice key starts with it.
func (l Layout) Root() string { return l.prefix + "/" }

// Desired is the key of the desired-state document.
func (l Layout) Desired() string { return l.prefix + "/desired" }

// Shift is the key of one shift intent.
func (l Layout) Shift(id string) (string, error) { return l.join("shifts", id) }

// ShiftsPrefix covers every shift intent.
func (l Layout) ShiftsPrefix() string { return l.prefix + "/shifts/" }

// ShiftProgress is the key of one shift's progress.
func (l Layout) ShiftProgress(id string) (string, error) { return l.join("shift-progress", id) }

// ShiftProgressPrefix covers every shift's progress.
func (l Layout) ShiftProgressPrefix() string { return l.prefix + "/shift-progress/" }

// Instance is the key of one agent-registered instance.
func (l Layout) Instance(cluster, subcluster string, addr netip.AddrPort) (string, error) {
	if !addr.IsValid() || addr.Port() == 0 {
		return "", fmt.Errorf("instance address %q is not ip:port with a port in 1..65535", addr)
	}
	k, err := l.join("instances", cluster, subcluster)
	if err != nil {
		return "", err
	}
	return k + "/" + addr.String(), nil
}

// InstancesPrefix covers every instance.
func (l Layout) InstancesPrefix() string { return l.prefix + "/instances/" }

// InstanceKey is a parsed instance key.
type InstanceKey struct {
	Cluster, SubCluster string
	Addr                netip.AddrPort
}

// ParseInstance parses a key built by Instance.
func (l Layout) ParseInstance(key string) (InstanceKey, error) {
	parts, err := l.split(key, "instances", 3)
	if err != nil {
		return InstanceKey{}, err
	}
	ap, err := netip.ParseAddrPort(parts[2])
	if err != nil || ap.Port() == 0 {
		return InstanceKey{}, fmt.Errorf("key %q: %q is not ip:port", truncate(key), truncate(parts[2]))
	}
	if ap.String() != parts[2] {
		// One spelling per instance: "1.2.3.4:080" would be a second key for 1.2.3.4:80.
		return InstanceKey{}, fmt.Errorf("key %q: %q is not in canonical form %s", truncate(key), truncate(parts[2]), ap)
	}
	for _, n := range parts[:2] {
		if err := ValidName(n); err != nil {
			return InstanceKey{}, fmt.Errorf("key %q: %w", truncate(key), err)
		}
	}
	return InstanceKey{Cluster: parts[0], SubCluster: parts[1], Addr: ap}, nil
}

// Demand is the key of one proxy's demand report.
func (l Layout) Demand(proxyCluster, proxyID string) (string, error) {
	return l.join("demand", proxyCluster, proxyID)
}

// DemandPrefix covers every demand report.
func (l Layout) DemandPrefix() string { return l.prefix + "/demand/" }

// Status is the key of one proxy's status.
func (l Layout) Status(proxyCluster, proxyID string) (string, error) {
	return l.join("status", proxyCluster, proxyID)
}

// StatusPrefix covers every proxy status; with a proxy cluster, only its proxies.
func (l Layout) StatusPrefix(proxyCluster string) (string, error) {
	if proxyCluster == "" {
		return l.prefix + "/status/", nil
	}
	k, err := l.join("status", proxyCluster)
	return k + "/", err
}

// LastSeen is the key of the lease-less copy of one proxy's last status: it
// outlives the status lease, so a proxy that died is shown GONE (for
// report.GoneFor) instead of vanishing.
func (l Layout) LastSeen(proxyCluster, proxyID string) (string, error) {
	return l.join("last-seen", proxyCluster, proxyID)
}

// LastSeenPrefix covers every last-seen record; with a proxy cluster, only its proxies.
func (l Layout) LastSeenPrefix(proxyCluster string) (string, error) {
	if proxyCluster == "" {
		return l.prefix + "/last-seen/", nil
	}
	k, err := l.join("last-seen", proxyCluster)
	return k + "/", err
}

// ParseLastSeen parses a key built by LastSeen.
func (l Layout) ParseLastSeen(key string) (ProxyKey, error) { return l.parseProxy(key, "last-seen") }

// ProxyKey is a parsed status or demand key.
type ProxyKey struct{ ProxyCluster, ProxyID string }

// ParseStatus parses a key built by Status.
func (l Layout) ParseStatus(key string) (ProxyKey, error) { return l.parseProxy(key, "status") }

// ParseDemand parses a key built by Demand.
func (l Layout) ParseDemand(key string) (ProxyKey, error) { return l.parseProxy(key, "demand") }

func (l Layout) parseProxy(key, kind string) (ProxyKey, error) {
	parts, err := l.split(key, kind, 2)
	if err != nil {
		return ProxyKey{}, err
	}
	for _, n := range parts {
		if err := ValidName(n); err != nil {
			return ProxyKey{}, fmt.Errorf("key %q: %w", truncate(key), err)
		}
	}
	return ProxyKey{ProxyCluster: parts[0], ProxyID: parts[1]}, nil
}

// Snapshot is the key of a snapshot manifest. Versions are zero-padded so
// that keys sort by version.
func (l Layout) Snapshot(proxyCluster string, version uint64) (string, error) {
	k, err := l.join("snapshots", proxyCluster)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%020d", k, version), nil
}

// SnapshotPrefix covers the snapshots of one proxy cluster ("" for all).
func (l Layout) SnapshotPrefix(proxyCluster string) (string, error) {
	if proxyCluster == "" {
		return l.prefix + "/snapshots/", nil
	}
	k, err := l.join("snapshots", proxyCluster)
	return k + "/", err
}

// SnapshotKey is a parsed snapshot key.
type SnapshotKey struct {
	ProxyCluster string
	Version      uint64
}

// ParseSnapshot parses a key built by Snapshot.
func (l Layout) ParseSnapshot(key string) (SnapshotKey, error) {
	parts, err := l.split(key, "snapshots", 2)
	if err != nil {
		return SnapshotKey{}, err
	}
	if err := ValidName(parts[0]); err != nil {
		return SnapshotKey{}, fmt.Errorf("key %q: %w", truncate(key), err)
	}
	v, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil || len(parts[1]) != 20 {
		return SnapshotKey{}, fmt.Errorf("key %q: version %q is not 20 decimal digits", truncate(key), truncate(parts[1]))
	}
	return SnapshotKey{ProxyCluster: parts[0], Version: v}, nil
}

// Part is the key of a content-addressed snapshot part.
func (l Layout) Part(digest string) (string, error) {
	if len(digest) != 64 || strings.Trim(digest, "0123456789abcdef") != "" {
		return "", fmt.Errorf("part digest %q is not 64 lowercase hex digits", truncate(digest))
	}
	return l.prefix + "/parts/" + digest, nil
}

// PartsPrefix covers every part.
func (l Layout) PartsPrefix() string { return l.prefix + "/parts/" }

// Current is the key of a proxy cluster's live-snapshot pointer.
func (l Layout) Current(proxyCluster string) (string, error) { return l.join("current", proxyCluster) }

// CurrentPrefix covers every pointer.
func (l Layout) CurrentPrefix() string { return l.prefix + "/current/" }

// ParseCurrent returns the proxy cluster of a pointer key.
func (l Layout) ParseCurrent(key string) (string, error) {
	parts, err := l.split(key, "current", 1)
	if err != nil {
		return "", err
	}
	if err := ValidName(parts[0]); err != nil {
		return "", fmt.Errorf("key %q: %w", truncate(key), err)
	}
	return parts[0], nil
}

// Rollout is the key of a proxy cluster's staged rollout record (written by
// the scheduler leader, fenced).
func (l Layout) Rollout(proxyCluster string) (string, error) { return l.join("rollouts", proxyCluster) }

// RolloutPrefix covers every staged rollout record.
func (l Layout) RolloutPrefix() string { return l.prefix + "/rollouts/" }

// RolloutOp is the key where lbctl asks the leader to promote, pause,
// resume, abort or retry a proxy cluster's staged rollout.
func (l Layout) RolloutOp(proxyCluster string) (string, error) {
	return l.join("rollout-ops", proxyCluster)
}

// RolloutOpPrefix covers every pending rollout operation.
func (l Layout) RolloutOpPrefix() string { return l.prefix + "/rollout-ops/" }

// Lineage is the key of the lineage record: the id of the history every
// snapshot and pointer under this prefix belongs to. The scheduler creates
// it when it finds the prefix without one (a fresh or wiped etcd).
func (l Layout) Lineage() string { return l.prefix + "/lineage" }

// Election is the scheduler election prefix (concurrency.NewElection).
func (l Layout) Election() string { return l.prefix + "/election" }

// Leader is the key where the scheduler leader publishes its API address.
func (l Layout) Leader() string { return l.prefix + "/leader" }

// SchedulerStatus is the key where the leader records, under its session
// lease, what it last did per proxy cluster (report.SchedulerStatus). No
// key: no scheduler is leading.
func (l Layout) SchedulerStatus() string { return l.prefix + "/scheduler-status" }

func (l Layout) join(kind string, names ...string) (string, error) {
	var b strings.Builder
	b.WriteString(l.prefix)
	b.WriteString("/")
	b.WriteString(kind)
	for _, n := range names {
		if err := ValidName(n); err != nil {
			return "", fmt.Errorf("%s key: %w", kind, err)
		}
		b.WriteString("/")
		b.WriteString(n)
	}
	return b.String(), nil
}

func (l Layout) split(key, kind string, n int) ([]string, error) {
	p := l.prefix + "/" + kind + "/"
	if !strings.HasPrefix(key, p) {
		return nil, fmt.Errorf("key %q is not under %s", truncate(key), p)
	}
	parts := strings.Split(key[len(p):], "/")
	if len(parts) != n {
		return nil, fmt.Errorf("key %q: want %d segments after %s, have %d", truncate(key), n, p, len(parts))
	}
	return parts, nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
