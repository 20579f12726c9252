package main

import (
	"bytes"
	"strings"
	"testing"
)

// --watch-stall-timeout (SLUICE_WATCH_STALL_TIMEOUT) must be positive: the
// refusal names the flag and the value before anything starts.
func TestWatchStallTimeoutMustBePositive(t *testing.T) {
	for _, v := range []string{"0s", "-4s"} {
		app := newApp()
		app.Writer = &bytes.Buffer{}
		err := app.Run([]string{"lbproxy", "--proxy-cluster", "BFE1", "--watch-stall-timeout", v})
		if err == nil || !strings.Contains(err.Error(), "--watch-stall-timeout "+v) || !strings.Contains(err.Error(), "want a positive duration") {
			t.Errorf("--watch-stall-timeout %s: %v", v, err)
		}
	}
	t.Setenv("SLUICE_WATCH_STALL_TIMEOUT", "0s")
	app := newApp()
	app.Writer = &bytes.Buffer{}
	if err := app.Run([]string{"lbproxy", "--proxy-cluster", "BFE1"}); err == nil || !strings.Contains(err.Error(), "--watch-stall-timeout 0s") {
		t.Errorf("SLUICE_WATCH_STALL_TIMEOUT=0s: %v", err)
	}
}

// --memory-release-interval (issue 23) refuses a negative duration, naming
// flag and value, before anything starts.
func TestMemoryReleaseIntervalNotNegative(t *testing.T) {
	app := newApp()
	app.Writer = &bytes.Buffer{}
	err := app.Run([]string{"lbproxy", "--proxy-cluster", "BFE1", "--memory-release-interval", "-1s"})
	if err == nil || !strings.Contains(err.Error(), "--memory-release-interval -1s: want 0 (never) or a positive duration") {
		t.Errorf("--memory-release-interval -1s: %v", err)
	}
}

// --h2-server takes sluice or xnet; anything else is refused, naming the
// flag, the value and the choices, before anything starts.
func TestH2ServerFlagChecked(t *testing.T) {
	app := newApp()
	app.Writer = &bytes.Buffer{}
	err := app.Run([]string{"lbproxy", "--proxy-cluster", "BFE1", "--h2-server", "nghttp2"})
	if err == nil || err.Error() != `--h2-server "nghttp2": want "sluice" or "xnet"` {
		t.Errorf("--h2-server nghttp2: %v", err)
	}
}
