package lbproxy

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// countLines counts the JSON log lines with this msg and version.
func countLines(logs string, msg string, version float64) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		if m["msg"] == msg && m["version"] == version {
			n++
		}
	}
	return n
}

// One apply gives one log line and one notification of the status
// reporter; so does one reject (they used to be logged by both lbproxy and
// configwatch, and reported by both).
func TestOneApplyOneLogLineOneNotification(t *testing.T) {
	_, cli := etcdtest.New(t)
	b1 := backendServer(t, "b1", nil)
	var logs syncbuf.Buffer
	var notified atomic.Int64
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir(),
		ReportInterval: time.Hour, onReport: func() { notified.Add(1) },
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	eventually(t, 10*time.Second, "v1 applied and etcd connected", func() bool {
		st := adminStatus(t, r)
		return st.AppliedVersion == 1 && st.EtcdConnected != nil && *st.EtcdConnected && countLines(logs.String(), "snapshot applied", 1) == 1
	})
	n0 := notified.Load()

	publish(t, cli, snapFor(2, b1.URL, map[string]int{"SC1": 60})) // rejected: the row does not sum to 100
	publish(t, cli, snapFor(3, b1.URL, map[string]int{"SC1": 100}))
	publish(t, cli, snapFor(4, b1.URL, map[string]int{"SC1": 100}))
	eventually(t, 10*time.Second, "v4 applied", func() bool { return countLines(logs.String(), "snapshot applied", 4) == 1 })
	// The watcher handles pointers one at a time: v2 and v3 are done, v4's
	// notification follows its log line.
	if d := notified.Load() - n0; d > 3 {
		t.Fatalf("%d notifications for one reject and two applies (v4's maybe still to come), want at most 3", d)
	}
	eventually(t, 10*time.Second, "v4's notification", func() bool { return notified.Load()-n0 == 3 })
	s := logs.String()
	if n := countLines(s, "snapshot rejected; keeping the last good one", 2); n != 1 {
		t.Errorf("%d log lines for the v2 reject, want 1", n)
	}
	for _, v := range []float64{1, 3, 4} {
		if n := countLines(s, "snapshot applied", v); n != 1 {
			t.Errorf("%d log lines for applying v%v, want 1", n, v)
		}
	}
	r.shutdown(t)
}
