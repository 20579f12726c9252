package backoff

import (
	"context"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

func TestDelay(t *testing.T) {
	cases := []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{0, 0, 50 * time.Millisecond},
		{0, 0.5, 75 * time.Millisecond},
		{1, 0, 100 * time.Millisecond},
		{3, 0.999999, 800*time.Millisecond - 1},
		{6, 0, 2500 * time.Millisecond},
		{100, 0, 2500 * time.Millisecond},
	}
	for _, c := range cases {
		got := Delay(c.attempt, c.u, DefaultMin, DefaultMax)
		if got < c.want-time.Microsecond || got > c.want+time.Microsecond {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.attempt, c.u, got, c.want)
		}
	}
}

func TestPolicyGrowsCapsAndResets(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond, Rand: rand.New(rand.NewPCG(1, 2))}
	bounds := [][2]time.Duration{{5, 10}, {10, 20}, {20, 40}, {20, 40}, {20, 40}}
	for i, b := range bounds {
		d := p.Next()
		if d < b[0]*time.Millisecond || d >= b[1]*time.Millisecond {
			t.Fatalf("attempt %d: delay %v outside [%v, %v)", i, d, b[0]*time.Millisecond, b[1]*time.Millisecond)
		}
	}
	p.Reset()
	if d := p.Next(); d < 5*time.Millisecond || d >= 10*time.Millisecond {
		t.Fatalf("after Reset: delay %v outside [5ms, 10ms)", d)
	}
}

func TestSleepStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a done context reported the full wait")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep of 1ms did not complete")
	}
}

// Sleep waits exactly d, or until ctx is done (fake clock: synctest).
func TestSleepWaitsTheDelayOrTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Hour) || time.Since(start) != time.Hour {
			t.Fatalf("Sleep(1h) returned after %s", time.Since(start))
		}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(10*time.Minute, cancel)
		start = time.Now()
		if Sleep(ctx, time.Hour) || time.Since(start) != 10*time.Minute {
			t.Fatalf("Sleep cancelled at 10m returned after %s", time.Since(start))
		}
	})
}
