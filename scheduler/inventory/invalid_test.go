package inventory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// A hand-written shift intent that fails decoding is ignored by the
// scheduler, and listed as invalid with the rule until it is fixed or
// deleted — by the watching inventory and by a one-off Load alike.
func TestInvalidIntentIsListedNotDropped(t *testing.T) {
	_, cli := etcdtest.New(t)
	put(t, cli, layout.Desired(), desired)
	inv := start(t, cli, &clock{t: time.Unix(1000, 0)})
	k, _ := layout.Shift("s-hand")
	put(t, cli, k, `{"id": "s-hand", "proxy_cluster": "BFE1", "percent": "fifty"}`)
	var why string
	poll.EventuallyTrue(t, 10*time.Second, "the bad shift listed as invalid", func() bool { why = inv.View().Invalid[k]; return why != "" })
	if !strings.HasPrefix(why, "shift intent ignored: ") || !strings.Contains(why, "percent") {
		t.Fatalf("reason %q; want the shift rule naming percent", why)
	}
	if _, ok := inv.View().Shifts["s-hand"]; ok {
		t.Fatal("an invalid intent is in the planner's shifts")
	}
	v, err := Load(context.Background(), cli, layout, nil)
	if err != nil || v.Invalid[k] != why || v.State == nil {
		t.Fatalf("Load: invalid %q, state %v, err %v; want %q", v.Invalid[k], v.State != nil, err, why)
	}

	put(t, cli, k, `{"id": "s-other", "proxy_cluster": "BFE1"}`)
	poll.EventuallyTrue(t, 10*time.Second, "the id mismatch listed", func() bool {
		return strings.Contains(inv.View().Invalid[k], `id "s-other" does not match key`)
	})
	if _, err := cli.Delete(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	poll.EventuallyTrue(t, 10*time.Second, "the deleted key no longer listed", func() bool { _, bad := inv.View().Invalid[k]; return !bad })
}
