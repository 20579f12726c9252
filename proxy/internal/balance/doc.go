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
// # Instance algorithms
//
// compileCluster turns policy.balance.instance into one instancePicker per
// cluster (instance.go, leastload.go): the pick makes one indirect call,
// never a switch on the algorithm. The sub-cluster pick (gslb.go) returns
// the group or ErrBlackhole, ErrNoAvailable or errSpill (no weighted
// sub-cluster has anything: a cross retry at once). No pick scans a
// sub-cluster: schedules, alias tables (weighted random draws, alias.go)
// and the ring's bucket index are read in O(1), map-based hashing's prefix
// sums in O(log n); the
// least-loaded algorithms (wlc, leastconn, wlc-random, first, and sticky's
// bounded load) read a loadTree, a segment tree of the members by
// in-flight / weight that Endpoint.acquire and release update (under the
// tree's own mutex, which no config update takes) for every cluster
// referencing the address; a least-loaded pick acquires its instance under
// the lock it picked under (loadTree.acquire), writing only the
// instance's record (loadMember: endpoint, count, weight and the count's
// cells as last read, one line): its leaf and path are written by the
// release if that comes first (nothing to write then: the count is back
// to what the leaf holds), else by the next pick's sync. A release of an
// address one tree tracks takes no lock: it swaps itself into the tree's
// rel slot and the next sync re-reads that one cell. Sticky cookies are signed
// once per table (cookie.go): a pick allocates nothing. A table's trees serve from its Holder.Store
// until the next; a selection still on a replaced table scans (the same
// answers, tested pick for pick). Groups under loadTreeMin members scan.
//
// wlc ties go to the first tied member the view's smooth-WRR schedule
// yields from the stripe's cursor (scheduleTries positions, then the next
// tied member after the last one looked at): an idle group walks the
// smooth-WRR sequence exactly. leastconn rotates, wlc-random draws.
//
// # Explain
//
// Cluster.Explain (explain.go) reads the table without changing anything a
// request sees — no acquire, no cursor, rotation or random draw — and
// names an instance only when the request decides it; otherwise it lists
// the candidates with their effective weights and the next pick where the
// algorithm's state determines it. Package proxy/explain wraps it with
// routing for lbproxy's admin API and lbctl.
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
