package lbproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// The proxy's demand report carries its view of every instance: healthy and
// available at first, then one request in flight while the backend holds
// it, then drained by an admin override.
func TestDemandReportCarriesInstances(t *testing.T) {
	_, cli := etcdtest.New(t)
	release := make(chan struct{})
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
		io.WriteString(w, "b")
	}))
	t.Cleanup(b.Close)
	t.Cleanup(func() { closeOnce(release) })
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir()})
	publish(t, cli, snapFor(1, b.URL, map[string]int{"SC1": 100}))
	addr := strings.TrimPrefix(b.URL, "http://")
	key, _ := layout.Demand("BFE1", "p1")
	seen := func(what string, ok func(report.ProxyInstance) bool) {
		t.Helper()
		var last []report.ProxyInstance
		poll.EventuallyTrue(t, 15*time.Second, what, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := cli.Get(ctx, key)
			if err != nil || len(res.Kvs) != 1 {
				return false
			}
			var d report.Demand
			if json.Unmarshal(res.Kvs[0].Value, &d) != nil {
				return false
			}
			last = d.Instances
			return len(d.Instances) == 1 && !d.InstancesTruncated && ok(d.Instances[0])
		})
		t.Logf("%s: %+v", what, last)
	}
	seen("the instance NORMAL and available, nothing in flight", func(p report.ProxyInstance) bool {
		return p == report.ProxyInstance{Cluster: "main", SubCluster: "SC1", Addr: addr, Health: report.ProxyHealthNormal, Available: true}
	})

	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.DefaultClient.Do(hostReq(t, "http://"+r.addrs.HTTP+"/hold", "demo.test"))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	seen("one request in flight", func(p report.ProxyInstance) bool { return p.InFlight == 1 && p.Available })
	closeOnce(release)
	<-done
	seen("nothing in flight after the answer", func(p report.ProxyInstance) bool { return p.InFlight == 0 })

	if code, e := adminDo(t, "POST", "http://"+r.addrs.Admin+"/v1/overrides", `{"addr":"`+addr+`","drain":true,"ttl":"1m"}`); code != 200 {
		t.Fatalf("set override: %d %v", code, e)
	}
	seen("drained by the override, not available", func(p report.ProxyInstance) bool {
		return p.Drained && !p.Available && p.Health == report.ProxyHealthNormal
	})
}

func hostReq(t *testing.T, url, host string) *http.Request {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return req
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
