// Package api is lbscheduler's HTTP API:
//
//	GET  /v1/plan                      the current matrix with explanations (JSON)
//	POST /v1/plan                      what-if: {"pins":[...]} | {"drain":"cluster/sub"} | {"shift":{...}}
//	                                   applied to the current inputs, computed, NOT published
//	GET  /v1/history?proxy_cluster=B   kept versions with their metadata
//	GET  /metrics                      Prometheus metrics
//	GET  /healthz                      the process runs
//	GET  /readyz                       the inventory listed every input
//	     /ui/                          the dashboard (Options.UI), read-only without the token
//
// It binds to loopback by default; Listen refuses another address without a
// bearer token, and every endpoint but /healthz and /readyz then requires
// "Authorization: Bearer <token>".
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/httpauth"
	"github.com/sluicelb/sluice/api/keys"
)

// ErrNotReady is returned by a Source before the inputs are known; the API
// answers 503.
var ErrNotReady = errors.New("not ready: inputs not listed yet")

// ErrBadRequest wraps what-if errors caused by the request (the API answers 400).
var ErrBadRequest = errors.New("bad request")

// WhatIf is a proposed change computed without publishing. Exactly one of
// the fields is set.
type WhatIf struct {
	// Pins are added to the desired state's pins (replacing a pin of the
	// same proxy cluster and cluster).
	Pins []config.Pin `json:"pins,omitempty"`
	// Drain is "cluster/subcluster" to drain.
	Drain string `json:"drain,omitempty"`
	// Shift is applied fully (AppliedPercent = Percent).
	Shift *config.Shift `json:"shift,omitempty"`
}

// Source answers the API's questions. Implementations are safe for
// concurrent use.
type Source interface {
	// Plan returns the current plan document (JSON-encodable).
	Plan(ctx context.Context) (any, error)
	// WhatIf computes the plan with w applied.
	WhatIf(ctx context.Context, w WhatIf) (any, error)
	// History returns the kept versions of a proxy cluster.
	History(ctx context.Context, proxyCluster string) (any, error)
	// Ready reports whether the inputs were listed.
	Ready() bool
}

// Options configure Handler.
type Options struct {
	Source Source
	// Token, when set, is required as a bearer token.
	Token string
	// Gatherer serves /metrics (nil: prometheus.DefaultGatherer).
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// UI, when set, serves /ui/ (the dashboard): its pages need no token,
	// it checks the token on its actions itself.
	UI http.Handler
}

// maxBody bounds a what-if request.
const maxBody = 1 << 20

// Handler returns the API.
func Handler(o Options) http.Handler {
	if o.Gatherer == nil {
		o.Gatherer = prometheus.DefaultGatherer
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	h := &handler{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !o.Source.Ready() {
			reason := "inventory not synced"
			if r, ok := o.Source.(interface{ NotReadyReason() string }); ok {
				reason = r.NotReadyReason()
			}
			http.Error(w, reason, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", h.auth(promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{})))
	mux.Handle("GET /v1/plan", h.auth(http.HandlerFunc(h.getPlan)))
	mux.Handle("POST /v1/plan", h.auth(http.HandlerFunc(h.postPlan)))
	mux.Handle("GET /v1/history", h.auth(http.HandlerFunc(h.history)))
	if o.UI != nil {
		mux.Handle("/ui/", o.UI)
	}
	return mux
}

type handler struct{ o Options }

func (h *handler) auth(next http.Handler) http.Handler {
	return httpauth.Require(h.o.Token, "lbscheduler", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
	}, next)
}

func (h *handler) getPlan(w http.ResponseWriter, r *http.Request) {
	v, err := h.o.Source.Plan(r.Context())
	h.reply(w, v, err)
}

func (h *handler) postPlan(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("what-if body: %w", err))
		return
	}
	var wi WhatIf
	if err := codec.UnmarshalJSON(raw, &wi); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("what-if body: %w", err))
		return
	}
	if err := wi.check(); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	v, err := h.o.Source.WhatIf(r.Context(), wi)
	h.reply(w, v, err)
}

func (h *handler) history(w http.ResponseWriter, r *http.Request) {
	pc := r.URL.Query().Get("proxy_cluster")
	if err := keys.ValidName(pc); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("proxy_cluster: %w", err))
		return
	}
	v, err := h.o.Source.History(r.Context(), pc)
	h.reply(w, v, err)
}

func (h *handler) reply(w http.ResponseWriter, v any, err error) {
	switch {
	case errors.Is(err, ErrNotReady):
		writeError(w, http.StatusServiceUnavailable, err)
	case errors.Is(err, ErrBadRequest):
		writeError(w, http.StatusBadRequest, err)
	case err != nil:
		h.o.Logger.Error("api request failed", "err", err)
		writeError(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// check accepts exactly one proposal with well-formed names.
func (wi WhatIf) check() error {
	n := 0
	if len(wi.Pins) > 0 {
		n++
	}
	if wi.Drain != "" {
		n++
		c, s, ok := strings.Cut(wi.Drain, "/")
		if !ok || keys.ValidName(c) != nil || keys.ValidName(s) != nil {
			return fmt.Errorf("drain %q: want \"cluster/subcluster\" with names of %s", wi.Drain, keys.NamePattern)
		}
	}
	if wi.Shift != nil {
		n++
	}
	if n != 1 {
		return fmt.Errorf("what-if: give exactly one of pins, drain, shift (got %d)", n)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// Listen opens addr; a non-loopback address needs a token.
func Listen(addr, token string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("api address %q: %w", addr, err)
	}
	if token == "" && !isLoopback(host) {
		return nil, fmt.Errorf("api address %q is not loopback: set an API token (--api-token) to expose it", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api listen: %w", err)
	}
	return ln, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves h on ln until ctx is done, then shuts down gracefully (5s).
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("api serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	<-errc
	return nil
}
