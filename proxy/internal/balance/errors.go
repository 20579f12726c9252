package balance

import "errors"

// Sentinel errors returned by Selection.Next; callers branch on them with
// errors.Is.
var (
	// ErrBlackhole: the request landed in the GSLB_BLACKHOLE share; answer it
	// at once, never forward or retry it.
	ErrBlackhole = errors.New("balance: request dropped by blackhole share")
	// ErrNoAvailable: no sub-cluster or instance can take the request.
	ErrNoAvailable = errors.New("balance: no available instance")
	// ErrRetryBudget: the proxy-wide retry budget is spent.
	ErrRetryBudget = errors.New("balance: retry budget exhausted")
	// ErrAttemptsExhausted: 1+retry_max+cross_retry attempts were used.
	ErrAttemptsExhausted = errors.New("balance: retry attempts exhausted")
	// ErrUnknownAddress: an override names an address no table references.
	ErrUnknownAddress = errors.New("balance: unknown address")
)
