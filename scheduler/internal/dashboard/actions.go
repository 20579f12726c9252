package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/httpauth"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/stateio"
	"github.com/sluicelb/sluice/scheduler/precheck"
)

// Action is one operator action from the page (POST /ui/api/action).
type Action struct {
	// Kind: pin, unpin, drain, undrain, shift (create), shift-pause,
	// shift-resume, shift-abort.
	Kind          string         `json:"kind"`
	Cluster       string         `json:"cluster,omitempty"`
	ProxyCluster  string         `json:"proxy_cluster,omitempty"`
	SubCluster    string         `json:"subcluster,omitempty"`
	ID            string         `json:"id,omitempty"`
	Weights       map[string]int `json:"weights,omitempty"`
	AllowFullDrop bool           `json:"allow_full_drop,omitempty"`
	Reason        string         `json:"reason,omitempty"`
	// A new shift (kind "shift"): Percent points of the row from IDC From
	// to IDC To, ramped over Ramp (e.g. "5m"; empty: at once) in steps of
	// Step points (0: lbctl's default, 10).
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Percent int    `json:"percent,omitempty"`
	Ramp    string `json:"ramp,omitempty"`
	Step    int    `json:"step,omitempty"`
}

// CSRFHeader must be on every action request: a cross-site form cannot set
// it, and a cross-site script cannot send it without a CORS preflight the
// dashboard never grants.
const CSRFHeader = "X-Sluice-Dashboard"

// Refusals, as the page shows them.
var (
	errReadOnly  = errors.New("this dashboard is read-only: the scheduler has no API token (lbscheduler --api-token); use lbctl")
	errCrossSite = errors.New("cross-site request refused: actions come from the dashboard page itself (same origin, " + CSRFHeader + " header)")
	errToken     = errors.New("missing or wrong bearer token")
)

type actionError struct {
	code int
	err  error
}

func (e *actionError) Error() string { return e.err.Error() }
func (e *actionError) Unwrap() error { return e.err }

func badRequest(err error) error { return &actionError{http.StatusBadRequest, err} }

const maxActionBody = 64 << 10

func (d *Dashboard) action(w http.ResponseWriter, r *http.Request) {
	if err := d.authorize(r); err != nil {
		var ae *actionError
		errors.As(err, &ae)
		if ae.code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="lbscheduler"`)
		}
		writeJSON(w, ae.code, map[string]string{"error": err.Error()})
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": "action body: " + err.Error()})
		return
	}
	var a Action
	if err := codec.UnmarshalJSON(raw, &a); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "action body: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	author := "dashboard@" + remoteHost(r)
	res, err := d.do(ctx, a, author)
	if err != nil {
		code := http.StatusInternalServerError
		var ae *actionError
		if errors.As(err, &ae) {
			code = ae.code
		}
		d.o.Logger.Warn("dashboard action refused", "kind", a.Kind, "cluster", a.Cluster, "proxy_cluster", a.ProxyCluster,
			"subcluster", a.SubCluster, "id", a.ID, "author", author, "err", err)
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	d.o.Logger.Info("dashboard action", "kind", a.Kind, "cluster", a.Cluster, "proxy_cluster", a.ProxyCluster,
		"subcluster", a.SubCluster, "id", a.ID, "author", author, "result", res.Message)
	writeJSON(w, http.StatusOK, res)
}

// actionResult is the answer to an action that was done (200): lbctl's
// sentence, and for every write — of the desired state or of a shift
// intent (create, pause, resume, abort) — its etcd revision and the one
// proxy cluster it concerns (none: all), which the page watches until the
// proxies run it. An answer without a revision wrote nothing, and the page
// says so. The values are JSON strings, so {"message": …} readers
// decoding into a map of strings still can.
type actionResult struct {
	Message      string `json:"message"`
	Revision     int64  `json:"revision,omitempty,string"`
	ProxyCluster string `json:"proxy_cluster,omitempty"`
}

// wroteDesired is the answer to a write of the desired state at rev that
// concerns pc ("" for all): the write's sentence, then that it is not live
// yet (api/edit, as lbctl prints them).
func wroteDesired(first, pc string, rev int64) actionResult {
	return actionResult{Message: first + " " + edit.NotLive(pc), Revision: rev, ProxyCluster: pc}
}

// authorize: a token must be configured and given; the request must be the
// page's own (CSRF header, same origin).
func (d *Dashboard) authorize(r *http.Request) error {
	if d.o.Token == "" {
		return &actionError{http.StatusForbidden, errReadOnly}
	}
	if r.Header.Get(CSRFHeader) != "1" || !sameOrigin(r) {
		return &actionError{http.StatusForbidden, errCrossSite}
	}
	if !httpauth.Valid(r, d.o.Token) {
		return &actionError{http.StatusUnauthorized, errToken}
	}
	return nil
}

func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true // not a browser's cross-origin fetch (those always send Origin)
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

func remoteHost(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// do performs one action with the edits lbctl uses (api/edit), validation
// and compare-and-swap; it returns lbctl's success sentence.
func (d *Dashboard) do(ctx context.Context, a Action, author string) (actionResult, error) {
	if a.AllowFullDrop && a.Kind != "pin" && a.Kind != "drain" {
		// Not dropped silently: only a pin or a drain can leave a row
		// nothing but GSLB_BLACKHOLE (lbctl's flag is on those too).
		return actionResult{}, badRequest(fmt.Errorf("action kind %q: allow_full_drop is for a pin or a drain only", a.Kind))
	}
	switch a.Kind {
	case "pin":
		if err := names(a.Cluster, a.ProxyCluster); err != nil {
			return actionResult{}, err
		}
		pin := config.Pin{ProxyCluster: a.ProxyCluster, Cluster: a.Cluster, Weights: a.Weights, AllowFullDrop: a.AllowFullDrop, Reason: a.Reason, Author: author}
		rev, err := d.updateState(ctx, precheck.WhatPin(a.ProxyCluster, a.Cluster), pinOverride, func(s *config.State) error { edit.Pin(s, pin); return nil })
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.PinWritten(a.ProxyCluster, a.Cluster, a.Weights, rev), a.ProxyCluster, rev), nil
	case "unpin":
		if err := names(a.Cluster, a.ProxyCluster); err != nil {
			return actionResult{}, err
		}
		// lbctl weights unpin names its write by the command.
		rev, err := d.updateState(ctx, precheck.WhatCommand("weights unpin"), otherOverride, func(s *config.State) error { return edit.Unpin(s, a.Cluster, a.ProxyCluster) })
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.UnpinWritten(a.ProxyCluster, a.Cluster, rev), a.ProxyCluster, rev), nil
	case "drain", "undrain":
		if err := names(a.Cluster, a.SubCluster); err != nil {
			return actionResult{}, err
		}
		on := a.Kind == "drain"
		override := otherOverride
		if on {
			override = drainOverride
		}
		rev, err := d.updateState(ctx, precheck.WhatDrain(on, a.Cluster, a.SubCluster), override, func(s *config.State) error {
			if on {
				// allow_full_drop (the dialog's box) lets the pinned rows
				// this drain empties drop all their traffic, as lbctl
				// drain --allow-full-drop.
				return edit.Drain(s, config.Drain{Cluster: a.Cluster, SubCluster: a.SubCluster, AllowFullDrop: a.AllowFullDrop, Reason: a.Reason, Author: author})
			}
			_, err := edit.Undrain(s, a.Cluster, a.SubCluster)
			return err
		})
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.DrainWritten(on, a.Cluster, a.SubCluster, rev), "", rev), nil
	case "shift":
		return d.createShift(ctx, a, author)
	case "shift-pause", "shift-resume", "shift-abort":
		state := map[string]string{"shift-pause": config.ShiftPaused, "shift-resume": config.ShiftRunning, "shift-abort": config.ShiftAborted}[a.Kind]
		sh, rev, err := d.setShiftState(ctx, a.ID, state)
		if err != nil {
			return actionResult{}, err
		}
		// The scheduler's input revision covers the shift intents, so the
		// page follows this write's revision as it follows a desired-state
		// write's (live once every proxy of the shift's proxy cluster runs a
		// snapshot computed from it or later).
		return actionResult{Message: edit.ShiftStateWritten(sh.ID, state, rev) + " " + edit.ShiftNotLive(sh.ProxyCluster), Revision: rev, ProxyCluster: sh.ProxyCluster}, nil
	default:
		return actionResult{}, badRequest(fmt.Errorf("action kind %q: want one of pin, unpin, drain, undrain, shift, shift-pause, shift-resume, shift-abort", a.Kind))
	}
}

func names(ns ...string) error {
	for _, n := range ns {
		if err := keys.ValidName(n); err != nil {
			return badRequest(err)
		}
	}
	return nil
}

// store is the desired state and the shift intents, written as lbctl
// writes them (api/stateio).
func (d *Dashboard) store() stateio.Store { return stateio.Store{KV: d.o.Client, Layout: d.o.Layout} }

// updateState applies mutate to the stored desired state and writes it as
// lbctl does (api/stateio): checked (edit.CheckEdit), refused when the
// scheduler could not publish it (scheduler/precheck, lbctl's words), then
// compare-and-swap, re-read and re-applied after a concurrent write. A
// write from the page is never urgent: it clears the mark of an urgent
// lbctl write, as any lbctl write without --urgent does. what names the
// write in a refusal (precheck.What*), override is the refusal's last line
// when every rejection is a full drop (the page's way to make it on
// purpose).
func (d *Dashboard) updateState(ctx context.Context, what, override string, mutate func(*config.State) error) (int64, error) {
	rev, err := d.store().Update(ctx, mutate, stateio.Write{Check: func(ctx context.Context, next *config.State) error {
		err := precheck.Check(ctx, d.o.Client, d.o.Layout, next, nil, what)
		if r, ok := errors.AsType[*precheck.Refusal](err); ok {
			r.Override = override
		}
		return err
	}})
	return rev, writeError(err)
}

// How a full drop the plan refuses is made on purpose, in the page's
// terms (lbctl's refusal names its flag, which a browser has not): a pin
// and a drain have their dialog's box (Action.AllowFullDrop, lbctl's
// --allow-full-drop). An undrain or an unpin leaves no pinned row with
// nothing to serve, and neither the page nor lbctl has an override for
// them: should the planner still say so, the write is what to change.
const (
	pinOverride   = `To drop all that traffic on purpose, tick "allow GSLB_BLACKHOLE=100" and send the pin again.`
	drainOverride = `To drop all that traffic on purpose, tick "allow a full drop" and send the drain again.`
	otherOverride = "Neither the page nor lbctl overrides this for an undrain or an unpin: change the write."
)

// setShiftState moves shift id to state as lbctl shift pause/resume/abort
// does (api/stateio): judged with the scheduler's progress (a finished
// shift is not paused), then compare-and-swap on the intent. It returns the
// intent written and the revision of that write; a refusal says nothing
// was written, in lbctl's words.
func (d *Dashboard) setShiftState(ctx context.Context, id, state string) (config.Shift, int64, error) {
	sh, rev, err := d.store().SetShiftState(ctx, id, state)
	if errors.Is(err, stateio.ErrNoShift) {
		return sh, 0, &actionError{http.StatusNotFound, fmt.Errorf("no shift %q; nothing was written", id)}
	}
	return sh, rev, writeError(err)
}

// writeError maps the errors of a write to the page's answers: 400 for a
// refusal (the edit, the validator, the scheduler's plan, no desired
// state), 409 for a key that kept changing; else 500.
func writeError(err error) error {
	var refused *stateio.Refused
	var plan *precheck.Refusal
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refused), errors.As(err, &plan), errors.Is(err, stateio.ErrNoState):
		return badRequest(err)
	case errors.Is(err, stateio.ErrConflict):
		return &actionError{http.StatusConflict, err}
	}
	return err
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
