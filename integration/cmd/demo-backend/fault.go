package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// fault makes a share of the answers fail or slow, for rollout drills:
// set at start (--fail-percent, --fail-status, --slow) or at run time with
// POST /admin/fault?percent=P&status=S&delay=D (percent=0 clears it).
// The affected answers are spread evenly over the sequence (answer n is hit
// when ⌊n·P/100⌋ grows), so the share is exact, not drawn, and exact in
// any window too: L consecutive answers hold L·P/100 ± 1 affected ones. (The
// first P of each hundred, as before, put a window of 90 answers anywhere
// from P−10 to P %: a staged rollout's gate, comparing a few hundred
// answers of a canary with the stable proxies', then saw a gap that was
// only the phase — e2e TestRolloutStagedFleetWideBurstNotBlamed failed so.)
type fault struct {
	mu      sync.Mutex
	percent int
	status  int
	delay   time.Duration
	seq     atomic.Uint64
}

func (f *fault) set(percent, status int, delay time.Duration) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("percent %d is outside 0-100", percent)
	}
	if status != 0 && (status < 100 || status > 599) {
		return fmt.Errorf("status %d is not an HTTP status", status)
	}
	f.mu.Lock()
	f.percent, f.status, f.delay = percent, status, delay
	f.mu.Unlock()
	return nil
}

// pick says whether this answer is affected, and how.
func (f *fault) pick() (hit bool, status int, delay time.Duration) {
	f.mu.Lock()
	p, s, d := f.percent, f.status, f.delay
	f.mu.Unlock()
	if p == 0 {
		return false, 0, 0
	}
	n, q := f.seq.Add(1), uint64(p) // n·q overflows after 10^17 answers
	return n*q/100 > (n-1)*q/100, s, d
}

// admin serves POST /admin/fault.
func (f *fault) admin(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST /admin/fault?percent=P&status=S&delay=D", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	percent, err := strconv.Atoi(q.Get("percent"))
	if err != nil {
		http.Error(w, "percent: want an integer 0-100", http.StatusBadRequest)
		return
	}
	status := 0
	if s := q.Get("status"); s != "" {
		if status, err = strconv.Atoi(s); err != nil {
			http.Error(w, "status: want an HTTP status", http.StatusBadRequest)
			return
		}
	}
	var delay time.Duration
	if d := q.Get("delay"); d != "" {
		if delay, err = time.ParseDuration(d); err != nil || delay < 0 {
			http.Error(w, "delay: want a duration like 200ms", http.StatusBadRequest)
			return
		}
	}
	if status == 0 && delay == 0 && percent > 0 {
		status = http.StatusInternalServerError
	}
	if err := f.set(percent, status, delay); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "fault: %d%% of answers, status %d, delay %s\n", percent, status, delay)
}
