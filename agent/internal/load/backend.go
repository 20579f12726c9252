// Package load gathers the load signals an agent reports: the backend's
// in-flight requests and request rate from its optional metrics endpoint
// (Prometheus text or JSON), and the host's CPU and memory use from /proc.
package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Default Prometheus metric names read from a text exposition. Samples with
// the same name and different labels are summed.
const (
	DefaultInFlightMetric = "http_requests_in_flight"
	DefaultRequestsMetric = "http_requests_total"
)

// MaxMetricsBody bounds how much of a metrics response is read (bytes).
const MaxMetricsBody = 4 << 20

// BackendOptions configure NewBackend; zero fields take the defaults.
type BackendOptions struct {
	// InFlightMetric and RequestsMetric name the Prometheus series
	// (defaults DefaultInFlightMetric and DefaultRequestsMetric).
	InFlightMetric, RequestsMetric string
	// Timeout bounds one attempt (default 2s).
	Timeout time.Duration
	// RetryMax is the number of retries after a failed attempt (default 2).
	RetryMax int
	// RetryWaitMin and RetryWaitMax bound the wait between attempts
	// (defaults 50ms and 500ms).
	RetryWaitMin, RetryWaitMax time.Duration
	// Logger receives retryablehttp's messages (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock used for rates (default time.Now).
	Now func() time.Time
}

// BackendSample is one reading of the backend metrics endpoint.
type BackendSample struct {
	// InFlight is the number of requests being served.
	InFlight int
	// RPS is the request rate since the previous successful reading;
	// HaveRPS is false for the first reading and after a counter reset.
	RPS     float64
	HaveRPS bool
	// At is when the reading was taken.
	At time.Time
}

// Backend reads one metrics endpoint. It is owned by one goroutine (it keeps
// the previous counter to compute a rate) and is not safe for concurrent use.
type Backend struct {
	url            string
	client         *retryablehttp.Client
	tr             *http.Transport
	inFlight, reqs string
	now            func() time.Time
	prevTotal      float64
	prevAt         time.Time
	havePrev       bool
}

// NewBackend returns a reader for the metrics endpoint at url.
func NewBackend(url string, o BackendOptions) (*Backend, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("metrics url %q must start with http:// or https://", url)
	}
	if o.InFlightMetric == "" {
		o.InFlightMetric = DefaultInFlightMetric
	}
	if o.RequestsMetric == "" {
		o.RequestsMetric = DefaultRequestsMetric
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.RetryMax < 0 {
		return nil, fmt.Errorf("metrics retry max %d must not be negative", o.RetryMax)
	}
	if o.RetryMax == 0 {
		o.RetryMax = 2
	}
	if o.RetryWaitMin <= 0 {
		o.RetryWaitMin = 50 * time.Millisecond
	}
	if o.RetryWaitMax <= 0 {
		o.RetryWaitMax = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	// No keep-alive: one small request every few seconds does not need a
	// pooled connection, and none is left behind when the agent stops.
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil, ResponseHeaderTimeout: o.Timeout}
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: tr, Timeout: o.Timeout}
	c.RetryMax = o.RetryMax
	c.RetryWaitMin = o.RetryWaitMin
	c.RetryWaitMax = o.RetryWaitMax
	// *slog.Logger has exactly retryablehttp's LeveledLogger methods.
	c.Logger = retryablehttp.LeveledLogger(o.Logger.With("component", "metrics-client"))
	return &Backend{url: url, client: c, tr: tr, inFlight: o.InFlightMetric, reqs: o.RequestsMetric, now: o.Now}, nil
}

// Close releases idle connections.
func (b *Backend) Close() { b.tr.CloseIdleConnections() }

// Fetch reads the endpoint once (with bounded retries) and returns the
// in-flight count and the request rate since the previous reading.
func (b *Backend) Fetch(ctx context.Context) (BackendSample, error) {
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return BackendSample{}, fmt.Errorf("metrics request: %w", err)
	}
	req.Header.Set("Accept", "application/json, text/plain;version=0.0.4;q=0.9")
	resp, err := b.client.Do(req)
	if err != nil {
		return BackendSample{}, fmt.Errorf("metrics %s: %w", b.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return BackendSample{}, fmt.Errorf("metrics %s: status %d", b.url, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxMetricsBody))
	if err != nil {
		return BackendSample{}, fmt.Errorf("metrics %s: read: %w", b.url, err)
	}
	inFlight, total, err := ParseMetrics(body, b.inFlight, b.reqs)
	if err != nil {
		return BackendSample{}, fmt.Errorf("metrics %s: %w", b.url, err)
	}
	now := b.now()
	s := BackendSample{InFlight: int(math.Round(inFlight)), At: now}
	if !math.IsNaN(total) {
		if b.havePrev && total >= b.prevTotal && now.After(b.prevAt) {
			s.RPS = (total - b.prevTotal) / now.Sub(b.prevAt).Seconds()
			s.HaveRPS = true
		}
		b.prevTotal, b.prevAt, b.havePrev = total, now, true
	}
	return s, nil
}

// ErrNoInFlight: the document has no in-flight value.
var ErrNoInFlight = errors.New("no in-flight value")

// ParseMetrics reads the in-flight gauge and the request counter from a
// JSON document {"in_flight":N,"requests_total":N} or a Prometheus text
// exposition (series named inFlightName and requestsName, summed over
// labels). A missing counter gives total = NaN; a missing in-flight value is
// ErrNoInFlight.
func ParseMetrics(body []byte, inFlightName, requestsName string) (inFlight, total float64, err error) {
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '{' {
		return parseJSON(t)
	}
	return parseText(body, inFlightName, requestsName)
}

func parseJSON(b []byte) (float64, float64, error) {
	var doc struct {
		InFlight      *float64 `json:"in_flight"`
		RequestsTotal *float64 `json:"requests_total"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, 0, fmt.Errorf("json: %w", err)
	}
	if doc.InFlight == nil {
		return 0, 0, fmt.Errorf("json: %w (want {\"in_flight\":N,\"requests_total\":N})", ErrNoInFlight)
	}
	if *doc.InFlight < 0 {
		return 0, 0, fmt.Errorf("json: in_flight %v is negative", *doc.InFlight)
	}
	total := math.NaN()
	if doc.RequestsTotal != nil {
		total = *doc.RequestsTotal
	}
	return *doc.InFlight, total, nil
}

func parseText(b []byte, inFlightName, requestsName string) (float64, float64, error) {
	var inFlight, total float64
	var haveIn, haveTotal bool
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := splitName(line)
		if name != inFlightName && name != requestsName {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			end := labelsEnd(rest)
			if end < 0 {
				return 0, 0, fmt.Errorf("line %d: unterminated labels", n+1)
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, 0, fmt.Errorf("line %d: %s has no value", n+1, name)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("line %d: %s value %q is not a number", n+1, name, fields[0])
		}
		if name == inFlightName {
			inFlight += v
			haveIn = true
		} else {
			total += v
			haveTotal = true
		}
	}
	if !haveIn {
		return 0, 0, fmt.Errorf("prometheus text: %w (no %s series)", ErrNoInFlight, inFlightName)
	}
	if !haveTotal {
		total = math.NaN()
	}
	return inFlight, total, nil
}

func splitName(line string) (string, string) {
	i := strings.IndexAny(line, "{ \t")
	if i < 0 {
		return line, ""
	}
	return line[:i], line[i:]
}

// labelsEnd returns the index of the '}' closing the label set that s
// starts with, honouring quoted values with escapes; -1 if none.
func labelsEnd(s string) int {
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return i
		}
	}
	return -1
}
