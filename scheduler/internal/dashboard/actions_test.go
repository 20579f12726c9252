package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// A write of the desired state from the page answers lbctl's first line
// and that it is not live yet — never that it is done in the traffic — with
// the revision and the proxy cluster the page then watches (as strings: a
// reader of {"message": …} into a map of strings still decodes it).
func TestDesiredStateActionsSayNotLive(t *testing.T) {
	_, cli := etcdtest.New(t)
	st := state()
	st.Scheduler = config.DefaultSchedulerSettings()
	c := st.Clusters["c"]
	c.Policy = config.DefaultPolicy()
	st.Clusters["c"] = c
	st.Pins[0].Weights = map[string]int{"SC1": 100}
	act := actionServer(t, cli, st)
	rev := func() int64 {
		t.Helper()
		r, err := cli.Get(context.Background(), layout.Desired())
		if err != nil || len(r.Kvs) == 0 {
			t.Fatalf("desired state: %v", err)
		}
		return r.Kvs[0].ModRevision
	}
	const all = "Written to the desired state only: not live until the scheduler publishes it and the proxies apply it."
	const bfe1 = "Written to the desired state only: not live until the scheduler publishes it and the proxies of BFE1 apply it."
	for _, c := range []struct {
		body, first, notLive, pc string
	}{
		{`{"kind":"undrain","cluster":"c","subcluster":"SC2"}`, "Undrained c/SC2 (desired state revision %d).", all, ""},
		{`{"kind":"drain","cluster":"c","subcluster":"SC2","reason":"idc2 maintenance"}`, "Drained c/SC2 (desired state revision %d).", all, ""},
		{`{"kind":"pin","cluster":"c","proxy_cluster":"BFE1","weights":{"SC1":90,"GSLB_BLACKHOLE":10}}`, "Pinned BFE1 row of c to SC1=90 GSLB_BLACKHOLE=10 (desired state revision %d).", bfe1, "BFE1"},
		{`{"kind":"unpin","cluster":"c","proxy_cluster":"BFE1"}`, "Unpinned BFE1 row of c (desired state revision %d).", bfe1, "BFE1"},
	} {
		code, out := act(c.body)
		r := rev()
		want := map[string]string{"message": fmt.Sprintf(c.first, r) + " " + c.notLive, "revision": fmt.Sprint(r)}
		if c.pc != "" {
			want["proxy_cluster"] = c.pc
		}
		if code != http.StatusOK || fmt.Sprint(out) != fmt.Sprint(want) {
			t.Errorf("%s: %d %q\nwant 200 %q", c.body, code, out, want)
		}
	}
	// Shift state changes write no desired state: the sentence alone.
	code, out := act(`{"kind":"shift-pause","id":"nope"}`)
	if code != http.StatusNotFound || out["revision"] != "" {
		t.Errorf("pause of an unknown shift: %d %q", code, out)
	}
}
