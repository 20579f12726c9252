package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
)

// Leadership is one term as scheduler leader: the election key this
// scheduler created and its create revision. Every write made as leader is
// fenced on them, so writes of a term that ended (lease expired, paused
// process, partition) fail in etcd.
type Leadership struct {
	session  *concurrency.Session
	election *concurrency.Election
	// Key and Rev identify the election key of this term.
	Key string
	Rev int64
}

// NewLeadership builds a Leadership from a known election key and revision;
// used to resume a term or, in tests, to hold a stale one.
func NewLeadership(key string, rev int64) *Leadership { return &Leadership{Key: key, Rev: rev} }

// Fence is the comparison every leader write is conditioned on.
func (l *Leadership) Fence() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.Key), "=", l.Rev)
}

// Done is closed when the term's session ends (lease lost or closed). A
// Leadership built by NewLeadership never reports done.
func (l *Leadership) Done() <-chan struct{} {
	if l.session == nil {
		return nil
	}
	return l.session.Done()
}

// Lease is the session lease (0 without a session).
func (l *Leadership) Lease() clientv3.LeaseID {
	if l.session == nil {
		return 0
	}
	return l.session.Lease()
}

// ShutdownTimeout bounds every etcd call made to give leadership up, so a
// stop (SIGTERM) is honoured within it whatever etcd does; an unanswered
// revoke only means the others wait for the lease TTL.
const ShutdownTimeout = 2 * time.Second

// Resign gives leadership up and revokes the session lease, so another
// scheduler takes over at once instead of after the TTL. Every etcd call is
// bounded by ctx (concurrency.Session.Close would wait up to the TTL).
func (l *Leadership) Resign(ctx context.Context) error {
	if l.session == nil {
		return nil
	}
	var err error
	if l.election != nil {
		err = l.election.Resign(ctx)
	}
	if cerr := closeSession(ctx, l.session); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("resign: %w", err)
	}
	return nil
}

// closeSession stops the session's keepalive and revokes its lease under
// ctx.
func closeSession(ctx context.Context, s *concurrency.Session) error {
	s.Orphan()
	_, err := s.Client().Revoke(ctx, s.Lease())
	return err
}

// Elector campaigns for scheduler leadership under layout.Election().
type Elector struct {
	cli    *clientv3.Client
	layout keys.Layout
	id     string
	ttl    time.Duration
}

// NewElector returns an elector for scheduler id; ttl is the session lease
// TTL (rounded up to whole seconds, at least 1s): how long a dead leader
// blocks the others.
func NewElector(cli *clientv3.Client, layout keys.Layout, id string, ttl time.Duration) *Elector {
	return &Elector{cli: cli, layout: layout, id: id, ttl: ttl}
}

// Campaign blocks until this scheduler is leader or ctx is done. On success
// it writes report.Leader (with apiAddr) under the session lease.
func (e *Elector) Campaign(ctx context.Context, apiAddr string) (*Leadership, error) {
	ttl := int((e.ttl + time.Second - 1) / time.Second)
	// The lease is granted under ctx, so shutdown (SIGTERM) ends a grant
	// etcd does not answer. The session outlives ctx on purpose: after ctx
	// ends, Resign must still be able to revoke the lease; Resign/Close
	// stops its keepalive.
	lease, err := e.cli.Grant(ctx, int64(max(ttl, 1)))
	if err != nil {
		return nil, fmt.Errorf("campaign: session: %w", err)
	}
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(max(ttl, 1)), concurrency.WithLease(lease.ID),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("campaign: session: %w", err)
	}
	el := concurrency.NewElection(s, e.layout.Election())
	if err := el.Campaign(ctx, e.id); err != nil {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		_ = closeSession(cctx, s)
		ccancel()
		return nil, fmt.Errorf("campaign: %w", err)
	}
	l := &Leadership{session: s, election: el, Key: el.Key(), Rev: el.Rev()}
	info, _ := json.Marshal(report.Leader{ID: e.id, APIAddr: apiAddr, Since: time.Now().UTC()})
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := e.cli.Txn(tctx).If(l.Fence()).
		Then(clientv3.OpPut(e.layout.Leader(), string(info), clientv3.WithLease(s.Lease()))).Commit()
	if err == nil && !r.Succeeded {
		err = ErrFenced
	}
	if err != nil {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		defer rcancel()
		_ = l.Resign(rctx)
		return nil, fmt.Errorf("campaign: write leader info: %w", err)
	}
	return l, nil
}
