//go:build e2e

package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicelb/sluice/integration/fleet"
)

// otlpSink is an OTLP/HTTP trace receiver that keeps every span.
type otlpSink struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	srv   *http.Server
	URL   string
}

func newOTLPSink(t *testing.T) *otlpSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{URL: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				s.spans = append(s.spans, ss.Spans...)
			}
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(out)
	})}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *otlpSink) trace(id string) []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*tracepb.Span
	for _, sp := range s.spans {
		if hex.EncodeToString(sp.TraceId) == id {
			out = append(out, sp)
		}
	}
	return out
}

func attr(sp *tracepb.Span, key string) string {
	for _, a := range sp.Attributes {
		if a.Key == key {
			v := a.Value
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetIntValue() != 0:
				return fmt.Sprint(v.GetIntValue())
			default:
				return fmt.Sprint(v.GetBoolValue())
			}
		}
	}
	return ""
}

// Scenario 9: a request that needed a cross-sub-cluster retry yields a trace
// with the server span and its pick, retry and forward children, and the
// backend received the traceparent.
func TestTraceOfCrossRetry(t *testing.T) {
	sink := newOTLPSink(t)
	// Passive health only, with a high threshold, so that the killed SC1
	// instances still look available and the request must cross.
	state := strings.Replace(string(fleet.DemoState), `      health:
        fail_num: 2
        check_interval: 500ms
        active: true`, `      health:
        fail_num: 100
        check_interval: 500ms
        active: false`, 1)
	state = strings.Replace(state, "instance_grace: 5s", "instance_grace: 10m", 1)
	f := startFleet(t, fleet.Options{State: []byte(state), ProxyEnv: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100", "SLUICE_TRACE_SAMPLE=1", "SLUICE_TRACE_EXPORTER=otlp",
	}})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	px := f.ProxiesOf("BFE1")[0]

	// A client IP whose primary pick is SC1.
	ip := ""
	for i := 1; i < 250 && ip == ""; i++ {
		cand := fmt.Sprintf("10.77.0.%d", i)
		var ex struct {
			Balance struct {
				SubCluster string `json:"subcluster"`
			} `json:"balance"`
		}
		q := url.Values{"url": {"http://demo.local/"}, "client_ip": {"127.0.0.1"}, "header": {"X-Forwarded-For:" + cand}}
		if err := getJSON(px.AdminURL+"/v1/explain?"+q.Encode(), &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Balance.SubCluster == "SC1" {
			ip = cand
		}
	}
	if ip == "" {
		t.Fatal("no client IP picks SC1 first")
	}
	for _, b := range f.BackendsOf("demo-main", "SC1") {
		b.Agent.Kill()
		b.Proc.Kill()
	}
	o := do("GET", px.URL+"/", ip)
	if o.Err != nil || o.Status != 200 || o.SubCluster != "SC2" {
		t.Fatalf("request from %s: %+v, want 200 from SC2 after a cross retry", ip, o)
	}
	// Find the trace through the backend's traceparent.
	var tp string
	for _, b := range f.BackendsOf("demo-main", "SC2") {
		if b.Addr != o.Instance {
			continue
		}
		var st struct {
			TP string `json:"last_traceparent"`
		}
		if err := getJSON("http://"+b.Addr+"/stats", &st); err != nil {
			t.Fatal(err)
		}
		tp = st.TP
	}
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		t.Fatalf("backend %s received traceparent %q", o.Instance, tp)
	}
	traceID := parts[1]
	var spans []*tracepb.Span
	eventually(t, 20*time.Second, "the trace reaches the collector", func() error {
		spans = sink.trace(traceID)
		for _, sp := range spans {
			if sp.Name == "sluice.request" {
				return nil
			}
		}
		return fmt.Errorf("%d spans of trace %s so far", len(spans), traceID)
	})
	var root *tracepb.Span
	for _, sp := range spans {
		if sp.Name == "sluice.request" {
			root = sp
		}
	}
	if root.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("root span kind %v", root.Kind)
	}
	count := map[string]int{}
	var crossPick, okForward bool
	for _, sp := range spans {
		if sp == root {
			continue
		}
		if string(sp.ParentSpanId) != string(root.SpanId) {
			t.Errorf("span %s is not a child of the server span", sp.Name)
		}
		count[sp.Name]++
		if sp.Name == "sluice.pick" && attr(sp, "sluice.cross") == "true" && attr(sp, "sluice.subcluster") == "SC2" {
			crossPick = true
		}
		if sp.Name == "sluice.forward" && attr(sp, "sluice.subcluster") == "SC2" && attr(sp, "sluice.instance") == o.Instance &&
			hex.EncodeToString(sp.SpanId) == parts[2] {
			okForward = true
		}
	}
	t.Logf("trace %s: %v", traceID, count)
	if count["sluice.pick"] < 2 || count["sluice.retry"] < 1 || count["sluice.forward"] < 2 {
		t.Errorf("span tree %v: want ≥2 picks, ≥1 retry, ≥2 forwards", count)
	}
	if !crossPick {
		t.Error("no pick span with sluice.cross=true into SC2")
	}
	if !okForward {
		t.Error("the backend's traceparent does not name the SC2 forward span")
	}
	if attr(root, "sluice.cluster") != "demo-main" || attr(root, "sluice.subcluster") != "SC2" {
		t.Errorf("server span attributes: cluster %q subcluster %q", attr(root, "sluice.cluster"), attr(root, "sluice.subcluster"))
	}
}
