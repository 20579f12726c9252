package logbuf

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder keeps each Write call separately.
type recorder struct {
	mu     sync.Mutex
	writes []string
	fail   bool
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return 0, errors.New("disk full")
	}
	r.writes = append(r.writes, string(p))
	return len(p), nil
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.writes...)
}

func TestLinesStayWholeAndInOrder(t *testing.T) {
	r := &recorder{}
	w := New(r, 10)
	for _, l := range []string{"aaaa\n", "bbbb\n", "cccc\n", "0123456789abc\n", "dd\n"} {
		if n, err := w.Write([]byte(l)); n != len(l) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", l, n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := []string{"aaaa\nbbbb\n", "cccc\n", "0123456789abc\n", "dd\n"}
	if got := r.get(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("writes %q, want %q", got, want)
	}
}

func TestNothingWrittenUntilFullOrFlushed(t *testing.T) {
	r := &recorder{}
	w := New(r, 64)
	w.Write([]byte("one line\n"))
	if got := r.get(); len(got) != 0 {
		t.Fatalf("wrote %q before a flush", got)
	}
	w.Flush()
	w.Flush() // nothing buffered: no empty write
	if got := r.get(); len(got) != 1 || got[0] != "one line\n" {
		t.Fatalf("writes %q, want the one line once", got)
	}
}

// A failed write drops the buffered lines and counts them; later lines
// are written once the destination works again.
func TestFailureDropsAndRecovers(t *testing.T) {
	r := &recorder{fail: true}
	w := New(r, 64)
	w.Write([]byte("lost\n"))
	if err := w.Flush(); err == nil {
		t.Fatal("Flush on a failing writer: nil error")
	}
	if w.Dropped() != 5 {
		t.Fatalf("Dropped = %d, want 5", w.Dropped())
	}
	r.mu.Lock()
	r.fail = false
	r.mu.Unlock()
	w.Write([]byte("kept\n"))
	w.Flush()
	if got := r.get(); len(got) != 1 || got[0] != "kept\n" {
		t.Fatalf("writes %q, want only the line after recovery", got)
	}
}

// Run flushes every period and once more at stop. The test runs in a
// synctest bubble: its clock is fake, so the period is exact and nothing
// waits for real time.
func TestRunFlushesPeriodicallyAndAtStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{}
		w := New(r, 1<<10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { w.Run(ctx, time.Second); close(done) }()
		synctest.Wait() // Run's ticker is set
		w.Write([]byte("tick\n"))
		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		if got := r.get(); len(got) != 0 {
			t.Fatalf("written %q before the first period ended", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := r.get(); len(got) != 1 || got[0] != "tick\n" {
			t.Fatalf("written %q at the first period, want the buffered line", got)
		}
		w.Write([]byte("last\n"))
		cancel()
		<-done
		if got := strings.Join(r.get(), ""); got != "tick\nlast\n" {
			t.Fatalf("written %q, want both lines after stop", got)
		}
	})
}

func TestConcurrentWritersKeepLines(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	w := New(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) }), 100)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				w.Write([]byte("0123456789012345678\n"))
			}
		}()
	}
	wg.Wait()
	w.Flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*500 {
		t.Fatalf("%d lines, want %d", len(lines), 8*500)
	}
	for _, l := range lines {
		if l != "0123456789012345678" {
			t.Fatalf("torn line %q", l)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
