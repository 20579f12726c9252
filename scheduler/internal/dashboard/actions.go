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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/httpauth"
	"github.com/sluicelb/sluice/api/keys"
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
	switch a.Kind {
	case "pin":
		if err := names(a.Cluster, a.ProxyCluster); err != nil {
			return actionResult{}, err
		}
		pin := config.Pin{ProxyCluster: a.ProxyCluster, Cluster: a.Cluster, Weights: a.Weights, AllowFullDrop: a.AllowFullDrop, Reason: a.Reason, Author: author}
		rev, err := d.updateState(ctx, func(s *config.State) error { edit.Pin(s, pin); return nil })
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.PinWritten(a.ProxyCluster, a.Cluster, a.Weights, rev), a.ProxyCluster, rev), nil
	case "unpin":
		if err := names(a.Cluster, a.ProxyCluster); err != nil {
			return actionResult{}, err
		}
		rev, err := d.updateState(ctx, func(s *config.State) error { return edit.Unpin(s, a.Cluster, a.ProxyCluster) })
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.UnpinWritten(a.ProxyCluster, a.Cluster, rev), a.ProxyCluster, rev), nil
	case "drain", "undrain":
		if err := names(a.Cluster, a.SubCluster); err != nil {
			return actionResult{}, err
		}
		rev, err := d.updateState(ctx, func(s *config.State) error {
			if a.Kind == "drain" {
				return edit.Drain(s, config.Drain{Cluster: a.Cluster, SubCluster: a.SubCluster, Reason: a.Reason, Author: author})
			}
			_, err := edit.Undrain(s, a.Cluster, a.SubCluster)
			return err
		})
		if err != nil {
			return actionResult{}, err
		}
		return wroteDesired(edit.DrainWritten(a.Kind == "drain", a.Cluster, a.SubCluster, rev), "", rev), nil
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

// casAttempts bounds the re-reads after a concurrent write (as lbctl).
const casAttempts = 5

// updateState applies mutate to the stored desired state, checks it
// (edit.CheckEdit) and writes it only if it is unchanged since the read; a
// concurrent write re-reads and re-applies mutate.
func (d *Dashboard) updateState(ctx context.Context, mutate func(*config.State) error) (int64, error) {
	key := d.o.Layout.Desired()
	for range casAttempts {
		st, modRev, err := d.readState(ctx)
		if err != nil {
			return 0, err
		}
		if err := mutate(&st); err != nil {
			return 0, badRequest(err)
		}
		if err := edit.CheckEdit(&st); err != nil {
			return 0, badRequest(err)
		}
		b, err := json.Marshal(&st)
		if err != nil {
			return 0, err
		}
		tr, err := d.o.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRev)).Then(clientv3.OpPut(key, string(b))).Commit()
		if err != nil {
			return 0, fmt.Errorf("write desired state: %w", err)
		}
		if tr.Succeeded {
			return tr.Header.Revision, nil
		}
	}
	return 0, &actionError{http.StatusConflict, errors.New("conflict: the desired state kept changing; nothing was written")}
}

// readState reads the stored desired state and its key's revision.
func (d *Dashboard) readState(ctx context.Context) (config.State, int64, error) {
	key := d.o.Layout.Desired()
	var st config.State
	r, err := d.o.Client.Get(ctx, key)
	if err != nil {
		return st, 0, fmt.Errorf("read desired state: %w", err)
	}
	if len(r.Kvs) == 0 {
		return st, 0, badRequest(fmt.Errorf("no desired state in etcd at %s yet: write one with lbctl apply -f FILE", key))
	}
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &st); err != nil {
		return st, 0, fmt.Errorf("stored desired state at %s is not valid: %w", key, err)
	}
	return st, r.Kvs[0].ModRevision, nil
}

// setShiftState moves shift id to state as lbctl shift pause/resume/abort
// does: judged with the scheduler's progress (a finished shift is not
// paused), then compare-and-swap on the intent. It returns the intent
// written and the revision of that write; a refusal says nothing was
// written, in lbctl's words.
func (d *Dashboard) setShiftState(ctx context.Context, id, state string) (config.Shift, int64, error) {
	var sh config.Shift
	k, err := d.o.Layout.Shift(id)
	if err != nil {
		return sh, 0, badRequest(fmt.Errorf("id: %w", err))
	}
	r, err := d.o.Client.Get(ctx, k)
	if err != nil {
		return sh, 0, err
	}
	if len(r.Kvs) == 0 {
		return sh, 0, &actionError{http.StatusNotFound, fmt.Errorf("no shift %q; nothing was written", id)}
	}
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &sh); err != nil {
		return sh, 0, fmt.Errorf("shift %s: %w", id, err)
	}
	prog, err := d.shiftProgress(ctx, id)
	if err != nil {
		return sh, 0, err
	}
	if err := edit.ShiftState(&sh, prog, state); err != nil {
		return sh, 0, badRequest(fmt.Errorf("%w; nothing was written", err))
	}
	b, _ := json.Marshal(sh)
	tr, err := d.o.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Kvs[0].ModRevision)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return sh, 0, err
	}
	if !tr.Succeeded {
		return sh, 0, &actionError{http.StatusConflict, fmt.Errorf("shift %s changed meanwhile; nothing was written, try again", id)}
	}
	return sh, tr.Header.Revision, nil
}

// shiftProgress is the progress the scheduler wrote for shift id (nil:
// none yet, or not readable as progress — as lbctl reads it).
func (d *Dashboard) shiftProgress(ctx context.Context, id string) (*config.ShiftProgress, error) {
	pk, err := d.o.Layout.ShiftProgress(id)
	if err != nil {
		return nil, nil
	}
	r, err := d.o.Client.Get(ctx, pk)
	if err != nil {
		return nil, err
	}
	if len(r.Kvs) == 0 {
		return nil, nil
	}
	var p config.ShiftProgress
	if codec.UnmarshalJSON(r.Kvs[0].Value, &p) != nil {
		return nil, nil
	}
	return &p, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
