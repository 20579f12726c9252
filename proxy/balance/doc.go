// Package balance is Sluice's data-plane balancer: given an immutable Table
// built from a snapshot and one request, it picks a sub-cluster (the GSLB
// level, with the GSLB_BLACKHOLE share), then an instance (the SLB level),
// and, when an attempt fails, the next attempt (in-sub-cluster retries, then
// cross-sub-cluster retries under a proxy-wide retry budget).
//
// # Shape
//
// Two speeds, as in gRPC-Go's weighted round robin balancer and Caddy's
// reverse proxy:
//
//   - A Table is compiled once per snapshot by Build and published whole
//     through a Holder (an atomic pointer). A request loads the pointer once;
//     it never sees two versions and never waits for a config update.
//   - Per-address runtime state (health state, in-flight count, failure
//     counters, slow-start clock, runtime overrides, EWMA latency, effective
//     weight) lives in one *Endpoint per address, owned by the Registry, and
//     survives table swaps. Smooth-WRR progress is kept per (cluster,
//     sub-cluster) in the Registry and reused when a new table keeps the
//     sub-cluster's members and weights unchanged.
//
// # Concurrency contract
//
// Registry, Table, Cluster and Holder are safe for concurrent use. Build and
// Holder.Store are meant to be called from one goroutine (the config
// applier); picks may run on any number of goroutines meanwhile. A Selection
// belongs to one request and must not be shared between goroutines; every
// Pick it returns must be reported exactly once with Pick.Done, and the
// Selection released with Release when the request ends. A server keeps the
// Selection in its per-request state and starts it with Cluster.Start;
// NewSelection takes one from a pool. The request path takes no lock that a
// config update holds; in the common case (every member of the sub-cluster
// available at its configured weight) a smooth-WRR pick is lock-free (a
// precomputed schedule read with an atomic cursor). A sub-cluster with
// members in slow start gets a schedule of its current weights, rebuilt as
// the ramp progresses.
//
// # Stripes
//
// Counters written by every request — the schedule cursor, the
// active-selection count of the retry budget, an endpoint's in-flight count —
// are split into cache-line-sized stripes, chosen by the stripe passed to
// Cluster.Start (the server derives it from the client connection). Requests
// on different cores then rarely write the same line. Each stripe walks the
// exact smooth-WRR sequence, as each nginx worker does; sums (InFlight,
// RetryStats) add the stripes up.
//
// # Blackhole and stickiness
//
// In the hashing sub-cluster modes ("consistent", "bfe") GSLB_BLACKHOLE is a
// member of the row like any sub-cluster, so the same key is always dropped
// (this is BFE's behaviour). In "request" mode, and whatever the mode before
// honouring a sticky cookie, the blackhole share is drawn first, so
// stickiness can never bypass the drop share.
package balance
