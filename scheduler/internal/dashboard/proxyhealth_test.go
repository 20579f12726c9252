package dashboard

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

func TestProxiesViews(t *testing.T) {
	pi := func(addr, health string, avail bool, mut func(*report.ProxyInstance)) report.ProxyInstance {
		p := report.ProxyInstance{Cluster: "c", SubCluster: "SC1", Addr: addr, Health: health, Available: avail, InFlight: 2}
		if mut != nil {
			mut(&p)
		}
		return p
	}
	reports := map[string]report.Demand{
		"k1": {ProxyCluster: "BFE1", ID: "p1", Instances: []report.ProxyInstance{
			pi("a:1", "NORMAL", true, nil), pi("b:1", "CHECKING", false, nil), pi("c:1", "NORMAL", true, func(p *report.ProxyInstance) { p.SlowStart = 0.4 }),
			pi("d:1", "NORMAL", false, func(p *report.ProxyInstance) { p.Excluded = true }), pi("e:1", "NORMAL", false, func(p *report.ProxyInstance) { p.Drained = true }),
		}},
		"k2": {ProxyCluster: "BFE2", ID: "p2", Instances: []report.ProxyInstance{
			pi("a:1", "NORMAL", true, nil), pi("b:1", "NORMAL", true, nil), pi("c:1", "NORMAL", true, func(p *report.ProxyInstance) { p.SlowStart = 0.25 }),
		}},
	}
	got := proxiesViews(reports, inflightSums(reports))
	want := map[instKey]*ProxiesView{
		{"c", "SC1", "a:1"}: {State: "healthy", Reporting: 2, InFlight: 4},
		{"c", "SC1", "b:1"}: {State: "ejected", Reporting: 2, Ejected: 1, Unavailable: 1, InFlight: 4, Detail: []string{"BFE1/p1 CHECKING"}},
		{"c", "SC1", "c:1"}: {State: "slow start", Reporting: 2, SlowStart: 2, SlowStartMin: 0.25, InFlight: 4,
			Detail: []string{"BFE1/p1 slow start 40%", "BFE2/p2 slow start 25%"}},
		{"c", "SC1", "d:1"}: {State: "unavailable", Reporting: 1, Unavailable: 1, InFlight: 2, Detail: []string{"BFE1/p1 excluded"}},
		{"c", "SC1", "e:1"}: {State: "drained", Reporting: 1, Drained: 1, Unavailable: 1, InFlight: 2, Detail: []string{"BFE1/p1 drained by override"}},
	}
	if !reflect.DeepEqual(got, want) {
		for k, v := range got {
			t.Logf("%v: %+v", k, *v)
		}
		t.Fatal("views differ from the want")
	}
	// In flight is the sampled figure, not the reports' latest.
	if v := proxiesViews(reports, map[instKey]int64{})[instKey{"c", "SC1", "a:1"}]; v.InFlight != 0 {
		t.Fatalf("in flight %d before any sample, want 0", v.InFlight)
	}
}

// The proxies' demand reports reach the health view of the document
// through the dashboard's demand watch: an ejection at once, the in-flight
// load at the next traffic sample; a report that goes away takes its view.
func TestProxiesViewFromDemandReports(t *testing.T) {
	_, cli := etcdtest.New(t)
	f := &fakeInputs{}
	f.set(func(in *Inputs) {
		in.State = state()
		in.Members = map[string]map[string][]config.Instance{"c": {"SC1": {{Addr: "10.0.0.1", Port: 80, Weight: 10}}}}
	})
	docs := sampling(t, cli, f, 50*time.Millisecond)

	put := func(id, health string, inflight int64) {
		t.Helper()
		k, _ := layout.Demand("BFE1", id)
		b, _ := json.Marshal(report.Demand{Instances: []report.ProxyInstance{{Cluster: "c", SubCluster: "SC1", Addr: "10.0.0.1:80",
			Health: health, Available: health == "NORMAL", InFlight: inflight}}})
		if _, err := cli.Put(context.Background(), k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	view := func(d Doc) *ProxiesView {
		for _, c := range d.Clusters {
			for _, s := range c.SubClusters {
				for _, i := range s.Instances {
					if c.Name == "c" && s.Name == "SC1" && i.Addr == "10.0.0.1:80" {
						return i.Proxies
					}
				}
			}
		}
		return nil
	}
	put("p1", "NORMAL", 3)
	put("p2", "CHECKING", 4)
	doc := next(t, docs, 10*time.Second, "10.0.0.1:80 ejected by p2 of two proxies, 7 in flight", func(d Doc) bool {
		v := view(d)
		return v != nil && v.State == "ejected" && v.Reporting == 2 && v.Ejected == 1 && v.InFlight == 7
	})
	if v := view(doc); !reflect.DeepEqual(v.Detail, []string{"BFE1/p2 CHECKING"}) {
		t.Fatalf("detail %q, want p2's view", v.Detail)
	}
	k, _ := layout.Demand("BFE1", "p2")
	if _, err := cli.Delete(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	next(t, docs, 10*time.Second, "healthy for the one proxy left, 3 in flight", func(d Doc) bool {
		v := view(d)
		return v != nil && v.State == "healthy" && v.Reporting == 1 && v.InFlight == 3
	})
}
