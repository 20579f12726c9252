package forward

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

// BenchmarkDoManyUpstreams is one GET through Do (100-byte body read and
// closed), round robin over n upstreams, each a loopback listener of this
// process, after every pool was warmed: at n=1000 each request takes a
// connection, and its buffers, last used 1000 requests ago (bench/run.sh's
// lbproxy-1k row). cpu-ns/op is the process's CPU per GET, the in-process
// backends included.
func BenchmarkDoManyUpstreams(b *testing.B) {
	answer := "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("x", 100)
	serve := func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			if _, err := readReq(br); err != nil {
				return
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	}
	for _, n := range []int{4, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ps := NewPools(Options{})
			ups := make([]*Upstream, n)
			for i := range ups {
				ups[i] = ps.Get(netip.MustParseAddrPort(rawBackend(b, serve)), testPool(4, 0, 0, time.Minute), config.Timeouts{})
			}
			b.Cleanup(ps.Close) // before the backends' cleanups: their connections end first
			ctx := context.Background()
			for _, up := range ups {
				if s, body, err := get(up, ctx); err != nil || s != 200 || len(body) != 100 {
					b.Fatalf("warm-up: %d, %d bytes, %v", s, len(body), err)
				}
			}
			var ru0, ru1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if s, body, err := get(ups[i%n], ctx); err != nil || s != 200 || len(body) != 100 {
					b.Fatalf("request %d: %d, %d bytes, %v", i, s, len(body), err)
				}
			}
			b.StopTimer()
			syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
			cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}
