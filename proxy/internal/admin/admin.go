// Package admin is lbproxy's admin HTTP API: liveness and readiness, Prometheus
// metrics, the applied configuration's status, the balancing table, request
// explanations and runtime overrides. Every answer is JSON; errors are
// {"error": "..."} with a fitting status code.
//
// The API binds to loopback by default. Bound anywhere else it refuses to
// start without a bearer token (CheckBind), and then every endpoint but
// /healthz and /readyz requires "Authorization: Bearer <token>".
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/httpauth"
	"github.com/sluicelb/sluice/proxy/explain"
	"github.com/sluicelb/sluice/proxy/internal/balance"
	"github.com/sluicelb/sluice/proxy/server"
)

// ErrTokenRequired is returned by CheckBind for a non-loopback address
// without a token.
var ErrTokenRequired = errors.New("admin: a bearer token is required when the admin API is not bound to loopback")

// CheckBind refuses an admin address that is not loopback unless a token is
// set. A host name other than "localhost" and an empty host (all interfaces)
// count as exposed.
func CheckBind(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin: address %q: %w", addr, err)
	}
	if token != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w (address %q)", ErrTokenRequired, addr)
}

// Config wires the API to the running proxy.
type Config struct {
	// Server is the request path (readiness, table, explain); required.
	Server *server.Server
	// Registry holds overrides; required.
	Registry *balance.Registry
	// Gatherer serves /metrics; nil means no /metrics.
	Gatherer prometheus.Gatherer
	// Status returns the JSON document of /v1/status; nil means a minimal one.
	Status func() any
	// Token, when set, is required as a bearer token.
	Token string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Pprof mounts net/http/pprof under /debug/pprof/ (behind the token like
	// every other non-probe endpoint). Off by default.
	Pprof bool
}

// MaxOverrideTTL bounds runtime overrides: an operator's change must expire.
const MaxOverrideTTL = 7 * 24 * time.Hour

// New returns the admin handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Server == nil || cfg.Registry == nil {
		return nil, errors.New("admin: Config.Server and Config.Registry are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &api{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", a.auth(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	}
	mux.Handle("GET /v1/status", a.auth(http.HandlerFunc(a.status)))
	mux.Handle("GET /v1/table", a.auth(http.HandlerFunc(a.table)))
	mux.Handle("GET /v1/explain", a.auth(http.HandlerFunc(a.explain)))
	mux.Handle("GET /v1/overrides", a.auth(http.HandlerFunc(a.listOverrides)))
	mux.Handle("POST /v1/overrides", a.auth(http.HandlerFunc(a.setOverride)))
	mux.Handle("DELETE /v1/overrides/{addr}", a.auth(http.HandlerFunc(a.clearOverride)))
	if cfg.Pprof {
		mux.Handle("GET /debug/pprof/", a.auth(http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", a.auth(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", a.auth(http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", a.auth(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", a.auth(http.HandlerFunc(pprof.Trace)))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s", r.Method, r.URL.Path))
	})
	return mux, nil
}

type api struct{ cfg Config }

func (a *api) auth(h http.Handler) http.Handler {
	return httpauth.Require(a.cfg.Token, "lbproxy-admin", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
	}, h)
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	if !a.cfg.Server.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "no snapshot applied yet"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ready": true, "version": a.cfg.Server.Version()})
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	if a.cfg.Status != nil {
		writeJSON(w, http.StatusOK, a.cfg.Status())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"applied_version": a.cfg.Server.Version()})
}

func (a *api) table(w http.ResponseWriter, r *http.Request) {
	t := a.cfg.Server.Table()
	if t == nil {
		writeError(w, http.StatusServiceUnavailable, server.ErrNotReady.Error())
		return
	}
	writeJSON(w, http.StatusOK, t.Describe())
}

// explain answers GET /v1/explain?url=...&method=...&client_ip=...&header=K:V&cookie=K=V.
func (a *api) explain(w http.ResponseWriter, r *http.Request) {
	req, peer, err := explain.Request(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	e, err := a.cfg.Server.Explain(req, peer)
	switch {
	case errors.Is(err, server.ErrNotReady):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, server.ErrNoRoute):
		writeJSON(w, http.StatusNotFound, map[string]any{"error": err.Error(), "explanation": e})
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// overrideRequest is the body of POST /v1/overrides.
type overrideRequest struct {
	Addr   string          `json:"addr"`
	Weight *int            `json:"weight,omitempty"`
	Drain  bool            `json:"drain,omitempty"`
	TTL    config.Duration `json:"ttl"`
}

func (a *api) setOverride(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	var o overrideRequest
	if err := dec.Decode(&o); err != nil {
		writeError(w, http.StatusBadRequest, "override body: "+err.Error())
		return
	}
	addr, err := netip.ParseAddrPort(o.Addr)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("addr %q: want ip:port", o.Addr))
		return
	}
	switch {
	case o.Weight == nil && !o.Drain:
		writeError(w, http.StatusBadRequest, "override: set weight or drain")
		return
	case o.Weight != nil && (*o.Weight < 0 || *o.Weight > config.MaxInstanceWeight):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("weight %d is outside 0..%d", *o.Weight, config.MaxInstanceWeight))
		return
	case o.TTL.D() <= 0 || o.TTL.D() > MaxOverrideTTL:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ttl %s is outside (0, %s]: every override must expire", o.TTL.D(), MaxOverrideTTL))
		return
	}
	err = a.cfg.Registry.SetOverride(netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()), balance.Override{Weight: o.Weight, Drain: o.Drain, TTL: o.TTL.D()})
	if err != nil {
		writeError(w, overrideStatus(err), err.Error())
		return
	}
	a.cfg.Logger.Info("override set", "addr", addr.String(), "weight", o.Weight, "drain", o.Drain, "ttl_seconds", o.TTL.D().Seconds())
	writeJSON(w, http.StatusOK, map[string]any{"addr": addr.String(), "weight": o.Weight, "drain": o.Drain, "ttl_seconds": o.TTL.D().Seconds()})
}

func (a *api) clearOverride(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("addr")
	addr, err := netip.ParseAddrPort(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("addr %q: want ip:port", raw))
		return
	}
	if err := a.cfg.Registry.ClearOverride(addr); err != nil {
		writeError(w, overrideStatus(err), err.Error())
		return
	}
	a.cfg.Logger.Info("override cleared", "addr", addr.String())
	writeJSON(w, http.StatusOK, map[string]any{"addr": addr.String(), "cleared": true})
}

// overrideView is one override as GET /v1/overrides shows it: durations in
// JSON are seconds (ttl_seconds), as everywhere in Sluice's JSON.
type overrideView struct {
	Weight     *int    `json:"weight,omitempty"`
	Drain      bool    `json:"drain,omitempty"`
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
}

func (a *api) listOverrides(w http.ResponseWriter, r *http.Request) {
	out := make(map[string]overrideView)
	for addr, o := range a.cfg.Registry.Overrides() {
		out[addr.String()] = overrideView{Weight: o.Weight, Drain: o.Drain, TTLSeconds: o.TTL.Seconds()}
	}
	writeJSON(w, http.StatusOK, out)
}

func overrideStatus(err error) int {
	if errors.Is(err, balance.ErrUnknownAddress) {
		return http.StatusNotFound
	}
	return http.StatusBadRequest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error": "encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
