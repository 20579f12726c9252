//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

// explained is the part of /v1/explain (and lbctl explain -o json) checked here.
type explained struct {
	Balance struct {
		SubCluster    string `json:"subcluster"`
		Blackhole     bool   `json:"blackhole"`
		Deterministic bool   `json:"deterministic"`
		Instance      string `json:"instance"`
		Candidates    []struct {
			Addr string `json:"addr"`
		} `json:"candidates"`
	} `json:"balance"`
}

// Issue 15 item 8: for a hashing algorithm the instance explain names is
// the one real requests go to. Explain (the proxy's admin API, and lbctl
// explain --proxy), then send the same request through the real lbproxy.
func TestExplainThenSend(t *testing.T) {
	state := strings.Replace(string(fleet.DemoState),
		"balance: {subcluster_mode: consistent, hash: {key: client_ip}, instance: wrr}",
		"balance: {subcluster_mode: consistent, hash: {key: client_ip}, instance: sticky}", 1)
	if state == string(fleet.DemoState) {
		t.Fatal("demo state: demo-main's balance line not found")
	}
	f := startFleet(t, fleet.Options{State: []byte(state)})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	px := f.ProxiesOf("BFE1")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seen := map[string]int{}
	for i := 1; i <= 40; i++ {
		ip := fmt.Sprintf("10.88.%d.%d", i/200, i%200+1)
		q := url.Values{"url": {"http://demo.local/"}, "client_ip": {"127.0.0.1"}, "header": {"X-Forwarded-For:" + ip}}
		var ex explained
		if err := getJSON(px.AdminURL+"/v1/explain?"+q.Encode(), &ex); err != nil {
			t.Fatal(err)
		}
		b := ex.Balance
		if !b.Deterministic {
			t.Fatalf("%s: sticky explained as not deterministic: %+v", ip, b)
		}
		if i <= 3 {
			out, code, err := f.Lbctl(ctx, "-o", "json", "explain", "--proxy", strings.TrimPrefix(px.AdminURL, "http://"),
				"--proxy-cluster", "BFE1", "--url", "http://demo.local/", "--client-ip", "127.0.0.1", "--header", "X-Forwarded-For:"+ip)
			var lx explained
			if err != nil || code != 0 || json.Unmarshal([]byte(out), &lx) != nil || lx.Balance.Instance != b.Instance || lx.Balance.SubCluster != b.SubCluster {
				t.Fatalf("lbctl explain %s: exit %d %v\n%s", ip, code, err, out)
			}
		}
		o := do("GET", px.URL+"/", ip)
		switch {
		case o.Err != nil:
			t.Fatalf("%s: %v", ip, o.Err)
		case b.Blackhole:
			if o.Status != 503 || o.Reason != "blackhole" {
				t.Fatalf("%s: explain says blackhole; the proxy answered %d %q from %q", ip, o.Status, o.Reason, o.Instance)
			}
			seen["blackhole"]++
		case o.Status != 200 || o.SubCluster != b.SubCluster || o.Instance != b.Instance:
			t.Fatalf("%s: explain names %s/%s, the request went to %s/%s (%d)", ip, b.SubCluster, b.Instance, o.SubCluster, o.Instance, o.Status)
		default:
			seen[o.Instance]++
		}
	}
	if len(seen) < 4 {
		t.Fatalf("40 client addresses reached only %v", seen)
	}
	t.Logf("outcomes: %v", seen)
}
