package etcdclient

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// health is what the calls' outcomes say about the connection.
type health struct {
	mu       sync.Mutex
	authFail bool
	last     State
	// specific is the last error since the last success that says more
	// than "deadline exceeded" (the etcd client returns a bare context
	// error where the attempt saw "connection refused").
	specific error
	counts   map[Class]uint64
	// failing is set from the first failure to the next success; logged
	// is the class last logged (a change of cause is logged again).
	failing      bool
	failingSince time.Time
	logged       Class
	// log and say: transitions are logged with the error said for a person.
	log *slog.Logger
	say func(err error, key string) error
}

func newHealth(log *slog.Logger, say func(err error, key string) error) *health {
	return &health{counts: map[Class]uint64{}, log: log, say: say}
}

// observe records one call's outcome (nil: success); key is what the call
// was about, named on permission denied. A cancelled context says nothing
// about etcd and is ignored.
func (h *health) observe(err error, key string) {
	var class Class
	if err != nil {
		if _, class = classify(err); class == "" {
			return
		}
	}
	h.mu.Lock()
	if err == nil {
		h.authFail, h.specific = false, nil
		recovered, since := h.failing, h.failingSince
		h.failing, h.logged = false, ""
		h.mu.Unlock()
		if recovered && h.log != nil {
			h.log.Info("etcd usable again", "failing_for", time.Since(since).Round(time.Millisecond).String())
		}
		return
	}
	h.counts[class]++
	if class == ClassTimeout && h.specific != nil && !dialAddr.MatchString(err.Error()) {
		h.mu.Unlock()
		return // a bare timeout: keep the cause already known
	}
	h.specific = err
	h.authFail = class == ClassAuth
	now := time.Now()
	said := h.say(err, key).Error()
	h.last = State{LastErrorClass: class, LastError: said, LastErrorAt: now}
	if !h.failing {
		h.failing, h.failingSince = true, now
	}
	logIt := h.logged != class
	h.logged = class
	h.mu.Unlock()
	if logIt && h.log != nil {
		h.log.Warn("etcd call failed", "class", string(class), "err", said)
	}
}

// cause returns the last specific error since the last success, or nil.
func (h *health) cause() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.specific
}

func (h *health) authBroken() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.authFail
}

func (h *health) state() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Errors returns the number of failed calls per class.
func (c *Client) Errors() map[Class]uint64 {
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	out := make(map[Class]uint64, len(Classes))
	for _, cl := range Classes {
		out[cl] = c.health.counts[cl]
	}
	return out
}

var (
	connectedDesc = prometheus.NewDesc("sluice_etcd_connected",
		"1 when the etcd connection is ready and its last call was not refused for authentication.", nil, nil)
	errorsDesc = prometheus.NewDesc("sluice_etcd_errors_total",
		"Failed etcd calls by class (unreachable, dns, tls, auth, permission, timeout, nospace, other).", []string{"class"}, nil)
)

// Collector exports sluice_etcd_connected and sluice_etcd_errors_total.
func (c *Client) Collector() prometheus.Collector { return collector{c} }

type collector struct{ c *Client }

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectedDesc
	ch <- errorsDesc
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if m.c.Connected() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, v)
	for cl, n := range m.c.Errors() {
		ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(n), string(cl))
	}
}
