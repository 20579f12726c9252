package config

import (
	"time"

	"github.com/sluicelb/sluice/api/codec"
)

// Policy is how proxies treat one backend cluster. Every field has a default
// (DefaultPolicy); a field left out of a document keeps its default.
type Policy struct {
	Balance   Balance         `json:"balance"`
	Retry     Retry           `json:"retry"`
	Health    Health          `json:"health"`
	Pool      Pool            `json:"pool"`
	Timeouts  Timeouts        `json:"timeouts"`
	SlowStart SlowStart       `json:"slow_start"`
	Blackhole BlackholePolicy `json:"blackhole"`
}

// Sub-cluster (GSLB) modes.
const (
	SubclusterConsistent = "consistent" // weighted rendezvous: a shift of x % moves ≈ x % of keys
	SubclusterBFE        = "bfe"        // BFE's murmur3 modulo ranges, exactly
	SubclusterRequest    = "request"    // per-request weighted pick, no stickiness
)

// Instance (SLB) modes.
const (
	InstanceWRR          = "wrr"           // smooth weighted round robin (nginx)
	InstanceWLC          = "wlc"           // weighted least connections, smooth WRR among ties
	InstanceWLCRandom    = "wlc-random"    // weighted least connections, random among ties
	InstanceP2CEWMA      = "p2c-ewma"      // power of two choices on EWMA latency × in-flight
	InstanceSticky       = "sticky"        // consistent hash of the cluster's hash key
	InstanceStickyCookie = "sticky-cookie" // HMAC-signed cookie naming the instance
	InstanceStaticRR     = "static-rr"     // HAProxy static-rr
	InstanceRoundRobin   = "roundrobin"    // HAProxy roundrobin (dynamic weights, slow start)
	InstanceLeastConn    = "leastconn"     // HAProxy leastconn
	InstanceFirst        = "first"         // HAProxy first
	InstanceRandom       = "random"        // HAProxy random; "random(N)" = power of N choices
	InstanceSource       = "source"        // HAProxy source (see hash_type)
	InstanceRingHash     = "ring_hash"     // Envoy ring_hash: the hash key on a consistent ring (sticky without bounded load)
	InstanceURI          = "uri"           // HAProxy uri: the path hashed ("uri whole": with the query; see hash_type)
	InstanceHdr          = "hdr"           // HAProxy hdr(<name>): a header's value hashed, round robin without it
	InstanceURLParam     = "url_param"     // HAProxy url_param(<name>): a query parameter hashed, round robin without it
)

// Hash keys.
const (
	HashClientIP   = "client_ip"
	HashHeader     = "header"       // header named by Hash.Header ("Cookie:NAME" for a cookie)
	HashHeaderOrIP = "header_or_ip" // the header, or the client IP when it is empty
	HashURI        = "uri"
)

// Balance selects sub-clusters and instances.
type Balance struct {
	// SubclusterMode: consistent (default), bfe or request.
	SubclusterMode string `json:"subcluster_mode"`
	// Hash is the key used by the sub-cluster pick and by sticky instance modes.
	Hash Hash `json:"hash"`
	// Instance: wrr (default), wlc, wlc-random, p2c-ewma, sticky,
	// sticky-cookie, static-rr, roundrobin, leastconn, first, random,
	// random(N), source, ring_hash, uri, uri whole, hdr(<name>),
	// url_param(<name>).
	Instance string `json:"instance"`
	// HashType for the HAProxy hash modes (source, uri, hdr, url_param):
	// map-based (default) or consistent.
	HashType string `json:"hash_type,omitempty"`
	// EffectiveWeights lowers a failing instance's weight (wrr only).
	EffectiveWeights bool `json:"effective_weights,omitempty"`
	// BoundedLoadPercent caps a sticky instance at this percentage of the
	// average load (125 = 1.25×); 0 disables. Applies to sticky modes.
	BoundedLoadPercent int `json:"bounded_load_percent,omitempty"`
	// StickyCookie is the cookie name for sticky-cookie. Default "SLUICE_STICKY".
	StickyCookie string `json:"sticky_cookie"`
	// FailFast: a sub-cluster with no available instance fails its share
	// (503) instead of spreading it over the rest of the row.
	FailFast bool `json:"fail_fast,omitempty"`
}

// Hash says which request attribute keys the pick.
type Hash struct {
	// Key: client_ip (default), header, header_or_ip or uri.
	Key string `json:"key"`
	// Header names the header for header keys; "Cookie:NAME" reads a cookie.
	Header string `json:"header,omitempty"`
}

// Retry bounds attempts per request.
type Retry struct {
	// RetryMax is extra attempts within the primary sub-cluster. Default 2 (BFE).
	RetryMax int `json:"retry_max"`
	// CrossRetry is attempts in other sub-clusters after that. Default 1.
	CrossRetry int `json:"cross_retry"`
	// NonIdempotent also retries POST/PATCH (when replayable). Default false.
	NonIdempotent bool `json:"non_idempotent,omitempty"`
	// MaxReplayBody is the largest request body buffered for replay, in
	// bytes. Default 65536; 0 means bodies are never replayed.
	MaxReplayBody int64 `json:"max_replay_body"`
	// BudgetPercent caps retries at this share of active requests. Default 20.
	BudgetPercent int `json:"budget_percent"`
	// BudgetMin always allows this many concurrent retries. Default 3.
	BudgetMin int `json:"budget_min"`
	// OnStatus lists backend statuses that count as failures worth a retry
	// (only for replayable requests), e.g. [502, 503]. Default none.
	OnStatus []int `json:"on_status,omitempty"`
}

// Health configures passive and active health checking.
type Health struct {
	// FailNum consecutive request failures put an instance in CHECKING. Default 5.
	FailNum int `json:"fail_num"`
	// SuccNum consecutive probe successes bring it back. Default 1.
	SuccNum int `json:"succ_num"`
	// CheckInterval is the probe period while CHECKING. Default 1s.
	CheckInterval Duration `json:"check_interval"`
	// Active enables always-on probing with Rise/Fall. Default false.
	Active bool `json:"active,omitempty"`
	// Interval between always-on probes. Default 2s.
	Interval Duration `json:"interval"`
	// Timeout of one probe. Default 1s.
	Timeout Duration `json:"timeout"`
	// Rise successes mark a down instance up; Fall failures mark it down. Defaults 2 and 3.
	Rise int `json:"rise"`
	Fall int `json:"fall"`
	// Probe describes the request a check sends.
	Probe Probe `json:"probe"`
	// OutlierStatus counts these backend statuses as request failures, e.g.
	// "5xx" or "502|503". Default "" (only connect errors and timeouts count).
	OutlierStatus string `json:"outlier_status,omitempty"`
	// PanicPercent: when fewer than this percentage of a sub-cluster's
	// instances are healthy (and at least one is), health is ignored. A
	// sub-cluster with none healthy leaves its share to the others, unless
	// no sub-cluster of the cluster has a healthy instance: then every one
	// ignores health (the last resort before 503). 0 disables. Default 0.
	PanicPercent int `json:"panic_percent"`
	// MaxEjectionPercent caps how much of a sub-cluster passive ejection may
	// remove (at least one instance may always be ejected). Default 50.
	MaxEjectionPercent int `json:"max_ejection_percent"`
}

// Probe is one health check request.
type Probe struct {
	// Scheme: http (default), https, tcp or tls.
	Scheme string `json:"scheme"`
	// Path for http(s). Default "/healthz".
	Path string `json:"path"`
	// Host header / SNI. Default: the instance address.
	Host string `json:"host,omitempty"`
	// Status that counts as success: "200", "2xx", "2xx|30x", "200-299". Default "2xx".
	Status string `json:"status"`
	// Body, when set, must appear in the response body.
	Body string `json:"body,omitempty"`
	// InsecureSkipVerify skips certificate checks for https/tls probes.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

// Pool configures connections to each backend address.
type Pool struct {
	// MaxIdleConnsPerHost idle keep-alive connections kept; 0 disables keep-alive. Default 32.
	MaxIdleConnsPerHost int `json:"max_idle_conns_per_host"`
	// MaxConnsPerHost caps connections per backend; 0 is no limit. Default 0.
	MaxConnsPerHost int `json:"max_conns_per_host"`
	// QueueTimeout is how long a request waits for a connection over the cap. Default 1s.
	QueueTimeout Duration `json:"queue_timeout"`
	// IdleTimeout closes idle connections; keep it below the backend's. Default 30s.
	IdleTimeout Duration `json:"idle_timeout"`
}

// Timeouts bound each phase of a request.
type Timeouts struct {
	// Connect is the dial timeout. Default 2s (BFE TimeoutConnSrv).
	Connect Duration `json:"connect"`
	// ResponseHeader waits for the backend's response headers. Default 60s.
	ResponseHeader Duration `json:"response_header"`
	// PerTry bounds one attempt; 0 disables. Default 0.
	PerTry Duration `json:"per_try"`
	// Request bounds the whole request including retries; 0 disables. Default 0.
	Request Duration `json:"request"`
	// ReadClient bounds reading the client request. Default 30s.
	ReadClient Duration `json:"read_client"`
	// WriteClient bounds writing the response. Default 60s.
	WriteClient Duration `json:"write_client"`
}

// SlowStart ramps new and recovered instances.
type SlowStart struct {
	// Window is the ramp length; 0 disables. Default 0.
	Window Duration `json:"window"`
	// FloorPercent is the starting fraction of the weight, 1..100. Default 10.
	FloorPercent int `json:"floor_percent"`
}

// BlackholePolicy says how dropped requests are answered and how much the
// scheduler may drop.
type BlackholePolicy struct {
	// Status answered to blackholed requests. Default 503.
	Status int `json:"status"`
	// RetryAfter is sent as Retry-After; 0 omits it. Default 5s.
	RetryAfter Duration `json:"retry_after"`
	// MaxPercent caps the share the scheduler may drop under overload
	// (pins are not capped). Default 50; 0 never drops.
	MaxPercent int `json:"max_percent"`
}

// DefaultPolicy returns the documented defaults.
func DefaultPolicy() Policy {
	return Policy{
		Balance: Balance{
			SubclusterMode: SubclusterConsistent,
			Hash:           Hash{Key: HashClientIP},
			Instance:       InstanceWRR,
			StickyCookie:   "SLUICE_STICKY",
		},
		Retry: Retry{RetryMax: 2, CrossRetry: 1, MaxReplayBody: 64 << 10, BudgetPercent: 20, BudgetMin: 3},
		Health: Health{
			FailNum: 5, SuccNum: 1, CheckInterval: Duration(time.Second),
			Interval: Duration(2 * time.Second), Timeout: Duration(time.Second),
			Rise: 2, Fall: 3,
			Probe:              Probe{Scheme: "http", Path: "/healthz", Status: "2xx"},
			MaxEjectionPercent: 50,
		},
		Pool: Pool{MaxIdleConnsPerHost: 32, QueueTimeout: Duration(time.Second), IdleTimeout: Duration(30 * time.Second)},
		Timeouts: Timeouts{
			Connect: Duration(2 * time.Second), ResponseHeader: Duration(60 * time.Second),
			ReadClient: Duration(30 * time.Second), WriteClient: Duration(60 * time.Second),
		},
		SlowStart: SlowStart{FloorPercent: 10},
		Blackhole: BlackholePolicy{Status: 503, RetryAfter: Duration(5 * time.Second), MaxPercent: 50},
	}
}

// DefaultStepInterval is SchedulerSettings.StepInterval when unset.
const DefaultStepInterval = 30 * time.Second

// DefaultSchedulerSettings returns the documented defaults.
func DefaultSchedulerSettings() SchedulerSettings {
	return SchedulerSettings{
		Denominator: DefaultDenominator, MaxStepPercent: 10, HysteresisPercent: 1,
		TargetUtilisationPercent: 80, CapacityPerWeightRPS: 100,
		InstanceGrace: Duration(30 * time.Second), History: 50,
	}
}

// UnmarshalJSON fills defaults before decoding, so a field left out of the
// document keeps its documented default and an explicit 0 stays 0.
func (c *Cluster) UnmarshalJSON(b []byte) error {
	type plain Cluster
	v := plain{Policy: DefaultPolicy()}
	if err := strictUnmarshal(b, &v); err != nil {
		return err
	}
	*c = Cluster(v)
	return nil
}

// UnmarshalJSON fills scheduler defaults before decoding.
func (s *State) UnmarshalJSON(b []byte) error {
	type plain State
	v := plain{Scheduler: DefaultSchedulerSettings()}
	if err := strictUnmarshal(b, &v); err != nil {
		return err
	}
	*s = State(v)
	return nil
}

// strictUnmarshal decodes one JSON value rejecting unknown fields. Custom
// UnmarshalJSON methods must use it: the outer decoder's setting does not
// reach into them.
func strictUnmarshal(b []byte, v any) error { return codec.DecodeFields(b, v) }

// StrictUnmarshal is strictUnmarshal for other packages whose types need the
// same defaulting pattern (snapshot.Cluster).
func StrictUnmarshal(b []byte, v any) error { return codec.DecodeFields(b, v) }
