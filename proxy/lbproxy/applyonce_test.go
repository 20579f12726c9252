package lbproxy

import (
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
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
	// outcomes counts the apply and reject lines logged so far. The watcher
	// logs an outcome and then notifies, from one goroutine, so each
	// notification is stamped with the number of outcomes it follows.
	outcomes := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"snapshot applied"`) || strings.Contains(l, `"msg":"snapshot rejected; keeping the last good one"`) {
				n++
			}
		}
		return n
	}
	var mu sync.Mutex
	stamps := map[int]int{} // outcomes logged → notifications made after them
	notes := func(k int) int { mu.Lock(); defer mu.Unlock(); return stamps[k] }
	r := start(t, Config{Etcd: Etcd{Endpoints: cli.Endpoints()}, CacheDir: t.TempDir(),
		ReportInterval: time.Hour, onReport: func() { k := outcomes(); mu.Lock(); stamps[k]++; mu.Unlock() },
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	publish(t, cli, snapFor(1, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v1 applied and etcd connected", func() bool {
		st := adminStatus(t, r)
		return st.AppliedVersion == 1 && st.EtcdConnected != nil && *st.EtcdConnected && countLines(logs.String(), "snapshot applied", 1) == 1
	})

	// Each pointer is published after the previous one was handled:
	// published back to back, a pointer can move on before its snapshot is
	// read, and is then rightly skipped.
	publish(t, cli, snapFor(2, b1.URL, map[string]int{"SC1": 60})) // rejected: the row does not sum to 100
	poll.EventuallyTrue(t, 10*time.Second, "v2's reject notified", func() bool { return notes(2) >= 1 })
	publish(t, cli, snapFor(3, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v3's apply notified", func() bool { return notes(3) >= 1 })
	publish(t, cli, snapFor(4, b1.URL, map[string]int{"SC1": 100}))
	poll.EventuallyTrue(t, 10*time.Second, "v4's apply notified", func() bool { return notes(4) >= 1 })
	for k, what := range map[int]string{2: "the v2 reject", 3: "applying v3", 4: "applying v4"} {
		if n := notes(k); n != 1 {
			t.Errorf("%d notifications for %s, want 1", n, what)
		}
	}
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
