// Package stateio reads and writes the operator's intents in etcd — the
// desired state and the shift intents — with compare-and-swap: the one
// read-mutate-check-write loop of lbctl and the scheduler's dashboard.
//
// Every write of the desired state is validated (api/edit) and then put to
// the caller's Check — lbctl and the dashboard pass the scheduler's plan
// check (scheduler/precheck, which api may not import) — before it is
// written only if the key is unchanged since it was read. The errors are
// typed so each caller maps them to its own answer (lbctl's exit codes,
// the dashboard's HTTP codes): ErrConflict, ErrNoState, ErrNoShift and
// *Refused; a Check's error is returned as it is.
package stateio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/edit"
	"github.com/sluicelb/sluice/api/keys"
)

var (
	// ErrConflict: the key changed since it was read (someone else wrote
	// it); nothing was written.
	ErrConflict = errors.New("conflict")
	// ErrNoState: there is no desired state to edit.
	ErrNoState = errors.New("no desired state stored")
	// ErrNoShift: there is no shift intent of that id.
	ErrNoShift = errors.New("no such shift")
)

// Refused is a write the rules refuse before anything is written: the edit
// itself (already drained, no such pin, a shift that cannot move to the
// state), or the validator. Its text is the refusal's.
type Refused struct{ Err error }

func (r *Refused) Error() string { return r.Err.Error() }
func (r *Refused) Unwrap() error { return r.Err }

// Attempts bounds the re-reads after a concurrent write of the desired
// state.
const Attempts = 5

// Store is the operator's intents under one key layout.
type Store struct {
	KV     clientv3.KV
	Layout keys.Layout
}

// Check refuses a would-be desired state before it is written (nil:
// accept it). lbctl and the dashboard pass the scheduler's plan check.
type Check func(ctx context.Context, next *config.State) error

// Write says how a desired state is written.
type Write struct {
	// Urgent marks the write (lbctl --urgent); nil clears a stored mark:
	// the mark is the write's, not the state's.
	Urgent *config.Urgent
	// Check runs on the state after validation, before the write.
	Check Check
	// AttemptTimeout bounds each of Update's attempts (read, check, write)
	// when not zero (lbctl's --timeout); ctx bounds them all.
	AttemptTimeout time.Duration
}

// Stored is the desired state with the etcd revision it was read at.
type Stored struct {
	State    config.State
	Revision int64 // ModRevision of the key; 0 when absent
}

// Read reads the stored desired state (Revision 0: none is stored).
func (s Store) Read(ctx context.Context) (Stored, error) {
	k := s.Layout.Desired()
	r, err := s.KV.Get(ctx, k)
	if err != nil {
		return Stored{}, fmt.Errorf("read desired state: %w", err)
	}
	if len(r.Kvs) == 0 {
		return Stored{}, nil
	}
	var st config.State
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &st); err != nil {
		return Stored{}, fmt.Errorf("stored desired state at %s is not valid: %w", k, err)
	}
	return Stored{State: st, Revision: r.Kvs[0].ModRevision}, nil
}

// ReadStored is Read for an edit, which needs a stored state (ErrNoState).
func (s Store) ReadStored(ctx context.Context) (Stored, error) {
	st, err := s.Read(ctx)
	if err == nil && st.Revision == 0 {
		err = fmt.Errorf("%w at %s: write one with lbctl apply -f FILE", ErrNoState, s.Layout.Desired())
	}
	return st, err
}

// Put validates next (edit.Check), puts it to w.Check and writes it only
// if the key's revision is still rev (0: only if it does not exist). It
// returns the revision of the write.
func (s Store) Put(ctx context.Context, next *config.State, rev int64, w Write) (int64, error) {
	next.Urgent = w.Urgent
	if err := edit.Check(next); err != nil {
		return 0, &Refused{err}
	}
	if w.Check != nil {
		if err := w.Check(ctx, next); err != nil {
			return 0, err
		}
	}
	b, err := json.Marshal(next)
	if err != nil {
		return 0, err
	}
	k := s.Layout.Desired()
	r, err := s.KV.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("write desired state: %w", err)
	}
	if !r.Succeeded {
		return 0, fmt.Errorf("%w: the desired state changed since revision %d (someone else wrote it); nothing was written — re-run to apply on top of the new state", ErrConflict, rev)
	}
	return r.Header.Revision, nil
}

// Update applies mutate to the stored desired state, checks the result
// (edit.CheckEdit, in the words of the objects the operator named) and
// writes it with Put. A concurrent write re-reads and re-applies mutate (a
// targeted edit such as a pin never loses the other writer's update), at
// most Attempts times.
func (s Store) Update(ctx context.Context, mutate func(*config.State) error, w Write) (int64, error) {
	for range Attempts {
		rev, err := s.attempt(ctx, mutate, w)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return rev, err
	}
	return 0, fmt.Errorf("%w: the desired state kept changing; nothing was written", ErrConflict)
}

func (s Store) attempt(ctx context.Context, mutate func(*config.State) error, w Write) (int64, error) {
	if w.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.AttemptTimeout)
		defer cancel()
	}
	st, err := s.ReadStored(ctx)
	if err != nil {
		return 0, err
	}
	if err := mutate(&st.State); err != nil {
		return 0, &Refused{err}
	}
	if err := edit.CheckEdit(&st.State); err != nil {
		return 0, &Refused{err}
	}
	return s.Put(ctx, &st.State, st.Revision, w)
}

// CreateShift writes the new shift intent sh: checked against the stored
// desired state (edit.CheckShift; none stored checks against an empty
// one), then by check (nil: none), then created only if its key does not
// exist yet (else ErrConflict). It returns the revision of the write.
func (s Store) CreateShift(ctx context.Context, sh config.Shift, check func(context.Context) error) (int64, error) {
	st, err := s.Read(ctx)
	if err != nil {
		return 0, err
	}
	if err := edit.CheckShift(&st.State, sh); err != nil {
		return 0, &Refused{err}
	}
	if check != nil {
		if err := check(ctx); err != nil {
			return 0, err
		}
	}
	k, err := s.Layout.Shift(sh.ID)
	if err != nil {
		return 0, &Refused{err}
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return 0, err
	}
	r, err := s.KV.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return 0, fmt.Errorf("write shift: %w", err)
	}
	if !r.Succeeded {
		return 0, conflict(fmt.Sprintf("shift %s already exists", sh.ID))
	}
	return r.Header.Revision, nil
}

// SetShiftState moves shift id to state as lbctl shift pause/resume/abort
// and the dashboard do: judged with the scheduler's progress
// (edit.ShiftState: a finished shift is not paused), then written only if
// the intent is unchanged since it was read. It returns the intent written
// and the revision of that write. A shift that is not there is ErrNoShift.
func (s Store) SetShiftState(ctx context.Context, id, state string) (config.Shift, int64, error) {
	var sh config.Shift
	k, err := s.Layout.Shift(id)
	if err != nil {
		return sh, 0, &Refused{fmt.Errorf("id: %w", err)}
	}
	r, err := s.KV.Get(ctx, k)
	if err != nil {
		return sh, 0, err
	}
	if len(r.Kvs) == 0 {
		return sh, 0, fmt.Errorf("%w %q", ErrNoShift, id)
	}
	if err := codec.UnmarshalJSON(r.Kvs[0].Value, &sh); err != nil {
		return sh, 0, fmt.Errorf("shift %s: %w", id, err)
	}
	prog, err := s.ShiftProgress(ctx, id)
	if err != nil {
		return sh, 0, err
	}
	if err := edit.ShiftState(&sh, prog, state); err != nil {
		return sh, 0, &Refused{fmt.Errorf("%w; nothing was written", err)}
	}
	b, err := json.Marshal(sh)
	if err != nil {
		return sh, 0, err
	}
	tr, err := s.KV.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", r.Kvs[0].ModRevision)).Then(clientv3.OpPut(k, string(b))).Commit()
	if err != nil {
		return sh, 0, err
	}
	if !tr.Succeeded {
		return sh, 0, conflict(fmt.Sprintf("shift %s changed meanwhile; nothing was written, try again", id))
	}
	return sh, tr.Header.Revision, nil
}

// ShiftProgress is the progress the scheduler wrote for shift id (nil:
// none yet, or not readable as progress).
func (s Store) ShiftProgress(ctx context.Context, id string) (*config.ShiftProgress, error) {
	pk, err := s.Layout.ShiftProgress(id)
	if err != nil {
		return nil, nil
	}
	r, err := s.KV.Get(ctx, pk)
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

// conflictError is an ErrConflict worded for its key alone.
type conflictError string

func conflict(msg string) error              { return conflictError(msg) }
func (e conflictError) Error() string        { return string(e) }
func (e conflictError) Is(target error) bool { return target == ErrConflict }
