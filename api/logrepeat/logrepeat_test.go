package logrepeat

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// The window is measured on the bubble's fake clock: each Sleep moves it exactly.
func TestRepeatedErrorsAreCountedOncePerWindow(t *testing.T) {
	synctest.Test(t, testRepeatedErrorsAreCountedOncePerWindow)
}

func testRepeatedErrorsAreCountedOncePerWindow(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.NewJSONHandler(&buf, nil), time.Minute)
	log := slog.New(h).With("cluster", "demo-main")
	probeErr := errors.New("connection refused")
	for i := 0; i < 57; i++ { // 57 failures within the first minute
		log.Error("probe failed", "addr", "127.0.0.1:18001", "err", probeErr)
		log.Info("probing", "n", i) // below warning: never held back
		time.Sleep(time.Second)
	}
	log.Error("probe failed", "addr", "127.0.0.1:18002", "err", probeErr) // another instance: its own line
	time.Sleep(3 * time.Second)                                           // 60 s after the first
	log.Error("probe failed", "addr", "127.0.0.1:18001", "err", probeErr)
	log.Error("probe failed", "addr", "127.0.0.1:18001", "err", probeErr) // held back again
	// The same message from a logger with other attributes is another line.
	slog.New(h).With("cluster", "demo-post").Error("probe failed", "addr", "127.0.0.1:18001", "err", probeErr)

	var errs []string
	infos := 0
	for _, m := range lines(t, &buf) {
		if m["level"] == "INFO" {
			infos++
			continue
		}
		errs = append(errs, m["msg"].(string)+" "+m["cluster"].(string)+" "+m["addr"].(string))
	}
	want := []string{
		"probe failed demo-main 127.0.0.1:18001",
		"probe failed demo-main 127.0.0.1:18002",
		"probe failed (repeated 57 times in 60 s) demo-main 127.0.0.1:18001",
		"probe failed demo-post 127.0.0.1:18001",
	}
	if strings.Join(errs, "\n") != strings.Join(want, "\n") || infos != 57 {
		t.Fatalf("error lines:\n%s\nwant:\n%s\n(%d info lines, want 57)", strings.Join(errs, "\n"), strings.Join(want, "\n"), infos)
	}
}

// All lines within one window (the bubble's clock stands still): none is
// evicted as expired, so the bound comes from starting over.
func TestManyDistinctLinesAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		h := New(slog.NewJSONHandler(&buf, nil), time.Minute)
		log := slog.New(h)
		for i := 0; i < 3*maxKeys; i++ {
			log.Warn("distinct", "i", i)
		}
		if n := len(h.st.lines); n > maxKeys {
			t.Fatalf("%d lines remembered, want at most %d", n, maxKeys)
		}
		if n := len(lines(t, &buf)); n != 3*maxKeys {
			t.Fatalf("%d lines written, want %d (none of them repeats)", n, 3*maxKeys)
		}
	})
}
