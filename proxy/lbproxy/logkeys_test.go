package lbproxy

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/logcheck"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// No JSON log line repeats a key (the components used to add proxy_cluster
// and id again to a logger that already had them), and spans of the stdout
// exporter go to TraceOutput, never into the log.
func TestLogLinesHaveNoDuplicateKeysAndNoSpans(t *testing.T) {
	_, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	var logs, traces syncbuf.Buffer
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir(),
		Logger:        slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		TraceExporter: "stdout", TraceSample: 1, TraceOutput: &traces})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v1 serves b1", func() bool {
		code, body, _ := httpGet(t, "http://"+r.addrs.HTTP+"/", "demo.test")
		return code == 200 && body == "b1"
	})
	poll.EventuallyTrue(t, 10*time.Second, "configwatch and statusreport log lines", func() bool {
		s := logs.String()
		return strings.Contains(s, `"component":"configwatch"`) && strings.Contains(s, `"component":"statusreport"`)
	})
	r.shutdown(t)
	if !strings.Contains(traces.String(), `"SpanContext"`) {
		t.Fatalf("no span reached TraceOutput:\n%.2000s", traces.String())
	}
	if !strings.Contains(logs.String(), `"msg"`) {
		t.Fatal("no log lines")
	}
	if strings.Contains(logs.String(), "SpanContext") {
		t.Errorf("a span in the log:\n%.2000s", logs.String())
	}
	for _, p := range logcheck.DuplicateKeys(logs.String()) {
		t.Error(p)
	}
}
