package snapshot

import (
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func TestIntentsForListsWhatTheProxyClusterIncludes(t *testing.T) {
	st := &config.State{
		Pins: []config.Pin{
			{ProxyCluster: "BFE2", Cluster: "demo-main", Author: "bob", Reason: "other row"},
			{ProxyCluster: "BFE1", Cluster: "demo-main", Author: "alice", Reason: "canary"},
		},
		Drains: []config.Drain{{Cluster: "demo-main", SubCluster: "SC1", Author: "carol", Reason: "maintenance"}},
	}
	shifts := []config.Shift{{ID: "s-2", ProxyCluster: "BFE2"}, {ID: "s-1", ProxyCluster: "BFE1", Author: "dan", Reason: "drill"}}
	want := []Intent{
		{Kind: IntentDrain, Object: "demo-main/SC1", Author: "carol", Reason: "maintenance"},
		{Kind: IntentPin, Object: "demo-main", Author: "alice", Reason: "canary"},
		{Kind: IntentShift, Object: "s-1", Author: "dan", Reason: "drill"},
	}
	if got := IntentsFor(st, shifts, "BFE1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("IntentsFor BFE1 = %+v\nwant %+v", got, want)
	}
	if got := IntentsFor(nil, nil, "BFE1"); got != nil {
		t.Fatalf("no state: %+v", got)
	}
	if s := want[0].String(); s != "drain demo-main/SC1" {
		t.Fatalf("String %q", s)
	}
}
