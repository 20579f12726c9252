package bfe

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/statusmatch"
	"github.com/sluicelb/sluice/api/validate"
)

// BFE's defaults (bfe_config/bfe_cluster_conf/cluster_conf), applied where a
// field is missing from cluster_conf.data.
const (
	bfeTimeoutConnSrvMS        = 2000
	bfeTimeoutResponseHeaderMS = 60000
	bfeMaxIdleConnsPerHost     = 2
	bfeCheckURI                = "/health_check"
	bfeFailNum                 = 5
	bfeSuccNum                 = 1
	bfeCheckIntervalMS         = 1000
	bfeRetryMax                = 2
	bfeCrossRetry              = 0
	bfeTimeoutReadClientMS     = 30000
	bfeTimeoutWriteClientMS    = 60000
)

// BFE hash strategies (GslbBasic.HashConf.HashStrategy).
const (
	hashClientID          = 0 // the HashHeader only
	hashClientIP          = 1 // the client IP (BFE's default)
	hashClientIDPreferred = 2 // the HashHeader, else the client IP
	hashRequestURI        = 3
)

func ms(v int) config.Duration { return config.Duration(time.Duration(v) * time.Millisecond) }

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// policyFromBFE maps one cluster_conf.data entry to a Sluice policy, applying
// BFE's defaults first. path prefixes error paths, e.g. "Config.p1".
func policyFromBFE(file, path string, c clusterConfEntry) (config.Policy, []string, error) {
	p := config.DefaultPolicy()
	var warns []string
	warn := func(field, format string, args ...any) {
		warns = append(warns, fmt.Sprintf("%s: %s: %s", file, join(path, field), fmt.Sprintf(format, args...)))
	}
	fail := func(field, format string, args ...any) error {
		return &FileError{File: file, Path: join(path, field), Msg: fmt.Sprintf(format, args...)}
	}
	nonNeg := func(field string, v int) error {
		if v < 0 {
			return fail(field, "%d must not be negative", v)
		}
		return nil
	}

	// BFE's balancing defaults: its sub-cluster hash assignment, so a fleet
	// migrates without moving clients.
	p.Balance.SubclusterMode = config.SubclusterBFE

	b := c.BackendConf
	if b == nil {
		b = &backendBasic{}
	}
	if b.Protocol != nil {
		switch proto := strings.ToLower(*b.Protocol); proto {
		case "http":
		case "https", "h2c", "fcgi", "tcp", "ws":
			warn("BackendConf.Protocol", "%q: Sluice forwards plain HTTP/1.1 to backends; imported as http", proto)
		default:
			return p, nil, fail("BackendConf.Protocol", "%q is not one of http, https, h2c, fcgi, tcp, ws (BFE rejects it too)", *b.Protocol)
		}
	}
	if b.FCGIConf != nil {
		warn("BackendConf.FCGIConf", "ignored: Sluice has no FastCGI backends")
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"BackendConf.TimeoutConnSrv", b.TimeoutConnSrv}, {"BackendConf.TimeoutResponseHeader", b.TimeoutResponseHeader},
		{"BackendConf.MaxIdleConnsPerHost", b.MaxIdleConnsPerHost}, {"BackendConf.SlowStartTime", b.SlowStartTime}} {
		if f.v != nil {
			if err := nonNeg(f.name, *f.v); err != nil {
				return p, nil, err
			}
		}
	}
	p.Timeouts.Connect = ms(intOr(b.TimeoutConnSrv, bfeTimeoutConnSrvMS))
	p.Timeouts.ResponseHeader = ms(intOr(b.TimeoutResponseHeader, bfeTimeoutResponseHeaderMS))
	p.Pool.MaxIdleConnsPerHost = intOr(b.MaxIdleConnsPerHost, bfeMaxIdleConnsPerHost)
	p.Pool.MaxConnsPerHost = max(intOr(b.MaxConnsPerHost, 0), 0) // BFE turns a negative value into 0 (no limit)
	p.SlowStart.Window = config.Duration(time.Duration(intOr(b.SlowStartTime, 0)) * time.Second)
	if rl := intOr(b.RetryLevel, 0); rl != 0 && rl != 1 {
		return p, nil, fail("BackendConf.RetryLevel", "%d is not 0 (connect failures) or 1 (also GET requests)", rl)
	}
	if b.OutlierDetectionHttpCode != nil && *b.OutlierDetectionHttpCode != "" {
		expr := strings.ToLower(*b.OutlierDetectionHttpCode)
		if _, err := statusmatch.Parse(expr); err != nil {
			return p, nil, fail("BackendConf.OutlierDetectionHttpCode", "%q: %v", *b.OutlierDetectionHttpCode, err)
		}
		p.Health.OutlierStatus = expr
	}

	ch := c.CheckConf
	if ch == nil {
		ch = &backendCheck{}
	}
	scheme := "http"
	if ch.Schem != nil {
		scheme = *ch.Schem
		switch scheme {
		case "http", "https", "tcp", "tls":
		default:
			return p, nil, fail("CheckConf.Schem", "%q is not a health check scheme: want http, https, tcp or tls (BFE rejects it too)", scheme)
		}
	}
	p.Health.Probe.Scheme = scheme
	uri := bfeCheckURI
	if ch.Uri != nil {
		uri = *ch.Uri
	}
	p.Health.Probe.Path = uri
	if ch.Host != nil {
		p.Health.Probe.Host = *ch.Host
	}
	if ch.HostType != nil && *ch.HostType != "HOST" {
		warn("CheckConf.HostType", "%q ignored: Sluice probes send CheckConf.Host, or the instance address when it is empty", *ch.HostType)
	}
	code := intOr(ch.StatusCode, 0)
	status, err := statusFromBFE(code, ch.StatusCodeRange)
	if scheme == "http" || scheme == "https" {
		if !strings.HasPrefix(uri, "/") {
			return p, nil, fail("CheckConf.Uri", "%q must start with '/' (BFE rejects it too)", uri)
		}
		if err != nil {
			field := "CheckConf.StatusCode"
			if ch.StatusCodeRange != nil && *ch.StatusCodeRange != "" {
				field = "CheckConf.StatusCodeRange"
			}
			return p, nil, fail(field, "%v (BFE rejects it too)", err)
		}
		p.Health.Probe.Status = status
	} else if err == nil {
		p.Health.Probe.Status = status
	}
	p.Health.FailNum = intOr(ch.FailNum, bfeFailNum)
	p.Health.SuccNum = intOr(ch.SuccNum, bfeSuccNum)
	if p.Health.SuccNum < 1 {
		return p, nil, fail("CheckConf.SuccNum", "%d must be at least 1 (BFE rejects it too)", p.Health.SuccNum)
	}
	if err := nonNeg("CheckConf.FailNum", p.Health.FailNum); err != nil {
		return p, nil, err
	}
	ci := intOr(ch.CheckInterval, bfeCheckIntervalMS)
	if err := nonNeg("CheckConf.CheckInterval", ci); err != nil {
		return p, nil, err
	}
	p.Health.CheckInterval = ms(ci)
	if ch.CheckTimeout != nil {
		if err := nonNeg("CheckConf.CheckTimeout", *ch.CheckTimeout); err != nil {
			return p, nil, err
		}
		p.Health.Timeout = ms(*ch.CheckTimeout)
	}

	g := c.GslbBasic
	if g == nil {
		g = &gslbBasic{}
	}
	p.Retry.CrossRetry = intOr(g.CrossRetry, bfeCrossRetry)
	p.Retry.RetryMax = intOr(g.RetryMax, bfeRetryMax)
	if err := nonNeg("GslbBasic.CrossRetry", p.Retry.CrossRetry); err != nil {
		return p, nil, err
	}
	if err := nonNeg("GslbBasic.RetryMax", p.Retry.RetryMax); err != nil {
		return p, nil, err
	}
	mode := "WRR"
	if g.BalanceMode != nil {
		mode = strings.ToUpper(*g.BalanceMode)
	}
	switch mode {
	case "WRR":
		p.Balance.Instance = config.InstanceWRR
	case "WLC":
		p.Balance.Instance = config.InstanceWLC
	case "EPP":
		return p, nil, fail("GslbBasic.BalanceMode", "EPP (endpoint picker) is not supported by Sluice; use WRR or WLC")
	default:
		return p, nil, fail("GslbBasic.BalanceMode", "%q is not WRR or WLC (BFE rejects it too)", *g.BalanceMode)
	}
	h := g.HashConf
	if h == nil {
		h = &hashConf{}
	}
	header := ""
	if h.HashHeader != nil {
		header = *h.HashHeader
	}
	switch strategy := intOr(h.HashStrategy, hashClientIP); strategy {
	case hashClientIP:
		p.Balance.Hash = config.Hash{Key: config.HashClientIP}
	case hashRequestURI:
		p.Balance.Hash = config.Hash{Key: config.HashURI}
	case hashClientID, hashClientIDPreferred:
		if header == "" {
			return p, nil, fail("GslbBasic.HashConf.HashHeader", "is empty, but HashStrategy %d needs it (BFE rejects it too)", strategy)
		}
		if name, ok := strings.CutPrefix(header, "Cookie:"); ok && strings.TrimSpace(name) == "" {
			return p, nil, fail("GslbBasic.HashConf.HashHeader", "%q names no cookie (BFE rejects it too)", header)
		}
		key := config.HashHeader
		if strategy == hashClientIDPreferred {
			key = config.HashHeaderOrIP
		}
		p.Balance.Hash = config.Hash{Key: key, Header: header}
	default:
		return p, nil, fail("GslbBasic.HashConf.HashStrategy", "%d is not 0 (client id), 1 (client ip), 2 (client id, else ip) or 3 (request uri) (BFE rejects it too)", strategy)
	}
	if h.SessionSticky != nil && *h.SessionSticky {
		p.Balance.Instance = config.InstanceSticky
	}
	if g.EPPAddr != nil {
		warn("GslbBasic.EPPAddr", "ignored: Sluice has no endpoint picker")
	}

	cb := c.ClusterBasic
	if cb == nil {
		cb = &clusterBasic{}
	}
	rc, wc := intOr(cb.TimeoutReadClient, bfeTimeoutReadClientMS), intOr(cb.TimeoutWriteClient, bfeTimeoutWriteClientMS)
	if err := nonNeg("ClusterBasic.TimeoutReadClient", rc); err != nil {
		return p, nil, err
	}
	if err := nonNeg("ClusterBasic.TimeoutWriteClient", wc); err != nil {
		return p, nil, err
	}
	p.Timeouts.ReadClient, p.Timeouts.WriteClient = ms(rc), ms(wc)
	if cb.DisableHealthCheck != nil && *cb.DisableHealthCheck {
		warn("ClusterBasic.DisableHealthCheck", "ignored: Sluice always checks instances that fail requests")
	}
	if cb.DisableHostHeader != nil && *cb.DisableHostHeader {
		warn("ClusterBasic.DisableHostHeader", "ignored: Sluice forwards the client's Host header")
	}
	if c.HTTPSConf != nil {
		warn("HTTPSConf", "ignored: Sluice forwards plain HTTP/1.1 to backends")
	}
	if c.AIConf != nil {
		warn("AIConf", "ignored: Sluice has no AI gateway features")
	}
	fitToSluice(&p, warn)
	return p, warns, nil
}

// fitToSluice clamps values BFE accepts but Sluice's validator bounds
// (api/validate), with a warning naming the BFE field, its value and the limit.
func fitToSluice(p *config.Policy, warn func(field, format string, args ...any)) {
	clampInt := func(field string, v *int, lo, hi int) {
		if *v < lo || *v > hi {
			nv := min(max(*v, lo), hi)
			warn(field, "%d is outside Sluice's range %d..%d: imported as %d", *v, lo, hi, nv)
			*v = nv
		}
	}
	clampInt("CheckConf.FailNum", &p.Health.FailNum, 1, validate.MaxHealthCount)
	clampInt("CheckConf.SuccNum", &p.Health.SuccNum, 1, validate.MaxHealthCount)
	clampInt("GslbBasic.RetryMax", &p.Retry.RetryMax, 0, validate.MaxRetry)
	clampInt("GslbBasic.CrossRetry", &p.Retry.CrossRetry, 0, validate.MaxRetry)
	clampDur := func(field string, d *config.Duration, hi time.Duration) {
		switch {
		case *d <= 0:
			warn(field, "0 is not a usable timeout in Sluice: imported as %s", hi)
			*d = config.Duration(hi)
		case d.D() > hi:
			warn(field, "%s is above Sluice's limit %s: imported as %s", d.D(), hi, hi)
			*d = config.Duration(hi)
		}
	}
	clampDur("BackendConf.TimeoutConnSrv", &p.Timeouts.Connect, validate.MaxConnectTimeout)
	clampDur("BackendConf.TimeoutResponseHeader", &p.Timeouts.ResponseHeader, validate.MaxDuration)
	clampDur("CheckConf.CheckInterval", &p.Health.CheckInterval, validate.MaxDuration)
	clampDur("CheckConf.CheckTimeout", &p.Health.Timeout, validate.MaxDuration)
	clampDur("ClusterBasic.TimeoutReadClient", &p.Timeouts.ReadClient, validate.MaxDuration)
	clampDur("ClusterBasic.TimeoutWriteClient", &p.Timeouts.WriteClient, validate.MaxDuration)
	if p.SlowStart.Window.D() > validate.MaxDuration {
		warn("BackendConf.SlowStartTime", "%s is above Sluice's limit %s: imported as %s", p.SlowStart.Window.D(), validate.MaxDuration, validate.MaxDuration)
		p.SlowStart.Window = config.Duration(validate.MaxDuration)
	}
}

// statusFromBFE turns BFE's StatusCode (100..599 exact, 0 any, 1..31 a mask
// of classes: bit 0 = 1xx … bit 4 = 5xx) or StatusCodeRange ("3xx|4x0|503",
// which wins when set, as in BFE's checker) into a statusmatch expression.
func statusFromBFE(code int, rng *string) (string, error) {
	var set [600]bool
	switch {
	case rng != nil && *rng != "":
		s := strings.ReplaceAll(*rng, " ", "")
		for _, part := range strings.Split(s, "|") {
			if len(part) != 3 || strings.Trim(part, "0123456789xX") != "" {
				return "", fmt.Errorf("StatusCodeRange %q: each part must be 3 characters of digits and x, like 3xx, 40x or 503", *rng)
			}
			for c := 100; c < 600; c++ {
				cs := strconv.Itoa(c)
				ok := true
				for i := 0; i < 3; i++ {
					if part[i] != 'x' && part[i] != 'X' && part[i] != cs[i] {
						ok = false
					}
				}
				if ok {
					set[c] = true
				}
			}
		}
	case code >= 100 && code <= 599:
		set[code] = true
	case code == 0:
		for c := 100; c < 600; c++ {
			set[c] = true
		}
	case code >= 1 && code <= 31:
		for c := 100; c < 600; c++ {
			if code&(1<<(c/100-1)) != 0 {
				set[c] = true
			}
		}
	default:
		return "", fmt.Errorf("%d is not a status code: want 100..599, 0 (any) or 1..31 (a mask of classes)", code)
	}
	return renderStatus(set), nil
}

// renderStatus writes a set of codes canonically: "100-599" for any, full
// classes as "2xx", full decades as "20x", single codes otherwise.
func renderStatus(set [600]bool) string {
	all := true
	for c := 100; c < 600; c++ {
		all = all && set[c]
	}
	if all {
		return "100-599"
	}
	var parts []string
	for class := 1; class <= 5; class++ {
		if full(set, class*100, 100) {
			parts = append(parts, fmt.Sprintf("%dxx", class))
			continue
		}
		for dec := class * 10; dec < class*10+10; dec++ {
			if full(set, dec*10, 10) {
				parts = append(parts, fmt.Sprintf("%dx", dec))
				continue
			}
			for c := dec * 10; c < dec*10+10; c++ {
				if set[c] {
					parts = append(parts, strconv.Itoa(c))
				}
			}
		}
	}
	return strings.Join(parts, "|")
}

func full(set [600]bool, from, n int) bool {
	for c := from; c < from+n; c++ {
		if !set[c] {
			return false
		}
	}
	return true
}

// statusToBFE is the inverse of statusFromBFE: StatusCode for an exact code
// or any, else StatusCodeRange made of 3-character parts.
func statusToBFE(expr string) (code int, rng string, err error) {
	m, err := statusmatch.Parse(expr)
	if err != nil {
		return 0, "", err
	}
	var set [600]bool
	n, only := 0, 0
	for c := 100; c < 600; c++ {
		if m.Match(c) {
			set[c] = true
			n++
			only = c
		}
	}
	switch {
	case n == 500:
		return 0, "", nil
	case n == 1:
		return only, "", nil
	}
	r := renderStatus(set)
	return 0, r, nil
}
