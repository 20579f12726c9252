package etcdwatch

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/sluicelb/sluice/api/snapshot"
)

// fakeConfirm stands for the quorum read: it answers r (or err) and counts.
type fakeConfirm struct {
	r     reading
	err   error
	calls int
}

func (f *fakeConfirm) read(context.Context) (reading, error) {
	f.calls++
	return f.r, f.err
}

func TestJudge(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const recheck = 3 * time.Second
	ctx := context.Background()
	cases := []struct {
		name      string
		lineage   bool
		known     string // the lineage known to the store
		cluster   uint64
		rev       int64
		confirm   fakeConfirm
		want      judgement
		wantErr   string
		wantCalls int
		wantSeen  int64
	}{
		{name: "forward", cluster: 7, rev: 101, want: sameStore, wantSeen: 100},
		{name: "equal", cluster: 7, rev: 100, want: sameStore, wantSeen: 100},
		{name: "another cluster id, no read", cluster: 8, rev: 200, want: replaced,
			wantErr: "etcd answered with cluster id 8, the listing with 7: another store (wiped, replaced or restored)", wantSeen: 100},
		{name: "lagging member: the quorum is at or past the revision seen", cluster: 7, rev: 97,
			confirm: fakeConfirm{r: reading{cluster: 7, rev: 103}}, want: behind, wantCalls: 1, wantSeen: 103,
			wantErr: "etcd revision went back from 100 to 97, and a quorum read answered 103: the same store, the response came from a member behind (or was queued before a newer read)"},
		{name: "quorum exactly at the revision seen", cluster: 7, rev: 99,
			confirm: fakeConfirm{r: reading{cluster: 7, rev: 100}}, want: behind, wantCalls: 1, wantSeen: 100,
			wantErr: "etcd revision went back from 100 to 99, and a quorum read answered 100: the same store, the response came from a member behind (or was queued before a newer read)"},
		{name: "wiped: the quorum is back too", cluster: 7, rev: 3,
			confirm: fakeConfirm{r: reading{cluster: 7, rev: 4}}, want: replaced, wantCalls: 1, wantSeen: 100,
			wantErr: "etcd revision went back from 100 to 3, and a quorum read answered 4: another store (wiped, replaced or restored)"},
		{name: "restored elsewhere: the quorum has another cluster id", cluster: 7, rev: 98,
			confirm: fakeConfirm{r: reading{cluster: 9, rev: 500}}, want: replaced, wantCalls: 1, wantSeen: 100,
			wantErr: "etcd answered with cluster id 9, the listing with 7: another store (wiped, replaced or restored)"},
		{name: "refilled past the revision seen: the lineage tells", lineage: true, known: "L1", cluster: 7, rev: 98,
			confirm: fakeConfirm{r: reading{cluster: 7, rev: 140, lineage: "L2"}}, want: replaced, wantCalls: 1, wantSeen: 100,
			wantErr: "lineage record changed from L1 to L2: another store (wiped, replaced or restored)"},
		{name: "lagging, same lineage", lineage: true, known: "L1", cluster: 7, rev: 98,
			confirm: fakeConfirm{r: reading{cluster: 7, rev: 101, lineage: "L1"}}, want: behind, wantCalls: 1, wantSeen: 101,
			wantErr: "etcd revision went back from 100 to 98, and a quorum read answered 101: the same store, the response came from a member behind (or was queued before a newer read)"},
		{name: "quorum read failed: nothing known", cluster: 7, rev: 98,
			confirm: fakeConfirm{err: errors.New("context deadline exceeded")}, want: unconfirmed, wantCalls: 1, wantSeen: 100,
			wantErr: "etcd revision went back from 100 to 98, and the confirming read failed: unconfirmed: context deadline exceeded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := newStore(7, 100, tc.known)
			j, err := id.judge(ctx, tc.cluster, tc.rev, t0, recheck, tc.lineage, tc.confirm.read)
			if j != tc.want {
				t.Errorf("judgement %d, want %d (err %v)", j, tc.want, err)
			}
			if got := errString(err); got != tc.wantErr {
				t.Errorf("err %q\\n want %q", got, tc.wantErr)
			}
			if tc.confirm.calls != tc.wantCalls {
				t.Errorf("%d confirming reads, want %d", tc.confirm.calls, tc.wantCalls)
			}
			if s := id.seen.Load(); s != tc.wantSeen {
				t.Errorf("seen %d, want %d", s, tc.wantSeen)
			}
			if tc.want == unconfirmed && !errors.Is(err, errUnconfirmed) {
				t.Errorf("err does not wrap errUnconfirmed: %v", err)
			}
		})
	}
}

// After a confirmation, the same member's later responses (not below the
// one explained) pass without a read until recheck is over; a response
// below the one explained (a fresh store restarts low) is read again.
func TestJudgeRechecks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	id := newStore(7, 100, "")
	f := &fakeConfirm{r: reading{cluster: 7, rev: 110}}
	step := func(rev int64, at time.Duration, want judgement, wantCalls int) {
		t.Helper()
		j, err := id.judge(ctx, 7, rev, t0.Add(at), time.Second, false, f.read)
		if j != want || f.calls != wantCalls {
			t.Fatalf("rev %d at %v: judgement %d after %d reads (err %v), want %d after %d", rev, at, j, f.calls, err, want, wantCalls)
		}
	}
	step(95, 0, behind, 1)                         // seen 110 now
	step(96, 100*time.Millisecond, stillBehind, 1) // the member moves on
	step(96, 200*time.Millisecond, stillBehind, 1)
	step(111, 300*time.Millisecond, sameStore, 1) // caught up
	step(97, 1500*time.Millisecond, behind, 2)    // recheck over: read again
	f.r.rev = 5
	step(2, 1600*time.Millisecond, replaced, 3) // below the one explained: read, and it is back
}

// A confirmation explains later responses for less than recheck: one
// exactly recheck after it is read again (the recheck window is open at
// its start, closed at its end).
func TestJudgeRecheckWindowEndsAtRecheck(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	id := newStore(7, 100, "")
	f := &fakeConfirm{r: reading{cluster: 7, rev: 110}}
	for i, s := range []struct {
		rev       int64
		at        time.Duration
		want      judgement
		wantCalls int
	}{
		{95, 0, behind, 1},
		{95, time.Second - time.Nanosecond, stillBehind, 1}, // the last instant explained
		{96, time.Second, behind, 2},                        // recheck over: read again
	} {
		j, err := id.judge(ctx, 7, s.rev, t0.Add(s.at), time.Second, false, f.read)
		if j != s.want || f.calls != s.wantCalls {
			t.Fatalf("step %d (rev %d at %v): judgement %d after %d reads (err %v), want %d after %d", i, s.rev, s.at, j, f.calls, err, s.want, s.wantCalls)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The store check's read is its own confirmation, against the revision
// seen before it began. The watch loop raises that revision meanwhile
// (here: a response at 105 arrives while the read is in flight); a reading
// of the same store begun earlier (103) is then below it, and is no sign of
// another store. The CI row-flap failure: "etcd revision went back from
// 3298 to 3297, and a quorum read answered 3297: another store" — its own
// reading judged against a revision seen after it. A store really back
// (a reading below what was seen before the read) is still found.
func TestStoreCheckJudgesAgainstTheRevisionSeenBeforeItsRead(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := newStore(7, 100, "L1")
	c := &Config{LineageKey: "/b/lineage", StoreCheckInterval: time.Millisecond}
	calls := 0
	read := func(context.Context) (reading, error) {
		calls++
		switch calls {
		case 1:
			id.raise(105) // the watch loop, during the read
			return reading{cluster: 7, rev: 103, lineage: "L1"}, nil
		case 2:
			return reading{cluster: 7, rev: 106, lineage: "L1"}, nil
		default:
			return reading{cluster: 7, rev: 4, lineage: "L1"}, nil // wiped and refilled a little
		}
	}
	err := checkStore(ctx, c, id, read)
	const want = "etcd revision 106 was seen, and a quorum read begun after it answered 4: another store (wiped, replaced or restored)"
	if got := errString(err); got != want || calls != 3 {
		t.Fatalf("after %d reads: err %q\n want %q after 3", calls, got, want)
	}
	if s := id.seen.Load(); s != 106 {
		t.Errorf("seen %d, want 106", s)
	}
}

// judge's confirming read is judged against the revision seen before it,
// too: the store check may raise it while the confirming read is in flight.
func TestJudgeConfirmsAgainstTheRevisionSeenBeforeItsRead(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	id := newStore(7, 100, "")
	confirm := func(context.Context) (reading, error) {
		id.raise(110) // the store check, during the confirming read
		return reading{cluster: 7, rev: 104}, nil
	}
	j, err := id.judge(context.Background(), 7, 98, t0, time.Second, false, confirm)
	const want = "etcd revision went back from 100 to 98, and a quorum read answered 104: the same store, the response came from a member behind (or was queued before a newer read)"
	if j != behind || errString(err) != want {
		t.Fatalf("judgement %d, err %q\n want %d, %q", j, errString(err), behind, want)
	}
	if s := id.seen.Load(); s != 110 {
		t.Errorf("seen %d, want 110", s)
	}
}

// A store check that etcd refuses for permission ends the round (the watch
// is made again, and etcd refuses that): an open watch would go on
// delivering after the read was revoked (etcd checks a watch's permission
// only when it is made). Other read errors (unreachable) are left to the
// watch's own handling.
func TestStoreCheckPermissionDeniedEndsTheWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id := newStore(7, 100, "")
	c := &Config{Key: "/b/current/X", StoreCheckInterval: time.Millisecond}
	calls := 0
	read := func(context.Context) (reading, error) {
		calls++
		if calls == 1 {
			return reading{}, context.DeadlineExceeded // unreachable: the check goes on
		}
		return reading{}, rpctypes.ErrPermissionDenied // as clientv3 returns it
	}
	err := checkStore(ctx, c, id, read)
	if !errors.Is(err, errAccessLost) || calls != 2 {
		t.Fatalf("after %d reads: err %v, want errAccessLost after 2", calls, err)
	}
	const want = "store check /b/current/X: read permission lost: etcdserver: permission denied"
	if got := errString(err); got != want {
		t.Errorf("err %q\n want %q", got, want)
	}
}

// LineageOf reads the lineage record's id; none or an unreadable one is "".
func TestLineageOf(t *testing.T) {
	rec, err := json.Marshal(snapshot.LineageRecord{ID: "20261201T000000Z-0a1b2c3d"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kvs  []*mvccpb.KeyValue
		want string
	}{
		{[]*mvccpb.KeyValue{{Value: rec}}, "20261201T000000Z-0a1b2c3d"},
		{[]*mvccpb.KeyValue{{Value: []byte("{not json")}}, ""},
		{nil, ""},
	} {
		if got := LineageOf(c.kvs); got != c.want {
			t.Errorf("LineageOf(%q) = %q, want %q", c.kvs, got, c.want)
		}
	}
}
