// Command sluice-dev starts the local Sluice fleet (`make run`): an embedded
// etcd, a scheduler, proxy clusters BFE1 (IDC1) and BFE2 (IDC2) with two
// proxies each, and demo backends with their agents — all real binaries on
// loopback. It prints what to try and stops everything cleanly on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluicelb/sluice/integration/fleet"
)

func main() {
	bin := flag.String("bin", "bin", "directory with lbproxy, lbscheduler, lbagent, lbctl and demo-backend")
	work := flag.String("workdir", ".run", "directory for logs, disk caches and etcd data")
	base := flag.Int("base-port", 18000, "first of the consecutive loopback ports the fleet uses (0: any free ports)")
	schedulers := flag.Int("schedulers", 1, "number of lbscheduler processes (2 shows leader election)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: sluice-dev [flags]\n\nStarts the local two-IDC Sluice fleet on loopback and prints what to try.\nCtrl-C stops everything.\n\nFlags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	binDir, _ := filepath.Abs(*bin)
	workDir, _ := filepath.Abs(*work)
	fmt.Println("Starting the Sluice local fleet…")
	start := time.Now()
	var env []string
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		// Spans go to a file of their own, not into the proxies' logs.
		env = append(env, "SLUICE_TRACE_EXPORTER=stdout", "SLUICE_TRACE_FILE="+filepath.Join(workDir, "logs", "traces.json"))
	}
	f, err := fleet.Start(ctx, fleet.Options{
		BinDir: binDir, WorkDir: workDir, BasePort: *base, Schedulers: *schedulers,
		Progress: os.Stdout, ProxyEnv: env,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-dev:", err)
		fmt.Fprintf(os.Stderr, "logs: %s\n", filepath.Join(workDir, "logs"))
		os.Exit(1)
	}
	printSummary(f, *bin, time.Since(start))
	<-ctx.Done()
	fmt.Println("\nStopping the fleet (proxies, scheduler, agents revoke their leases)…")
	if errs := f.Stop(); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(os.Stderr, "  !", e)
		}
		os.Exit(1)
	}
	fmt.Println("Stopped cleanly.")
}

func printSummary(f *fleet.Fleet, bin string, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nSluice local fleet is up (%s). Ctrl-C stops it. Logs: %s\n\n", took.Round(100*time.Millisecond), f.LogDir)
	fmt.Fprintf(&b, "  etcd        %s\n", f.Endpoints)
	for i, s := range f.SchedAPIs {
		fmt.Fprintf(&b, "  scheduler   %s  (API; scheduler-%d)\n", s, i+1)
	}
	for _, p := range f.Proxies {
		fmt.Fprintf(&b, "  proxy %-5s %-24s admin %s\n", p.ProxyCluster, p.URL, p.AdminURL)
	}
	bfe1 := f.ProxiesOf("BFE1")[0]
	lbctl := filepath.Join(bin, "lbctl") + " --endpoints " + f.Endpoints
	fmt.Fprintf(&b, "\nTry:\n")
	fmt.Fprintf(&b, "  1. Which sub-cluster answers (BFE1's row is pinned to SC1 45 / SC2 45 / BLACKHOLE 10):\n")
	fmt.Fprintf(&b, "     for i in $(seq 20); do curl -s -o /dev/null -w '%%{http_code} %%header{x-sluice-backend-subcluster}%%header{x-sluice-reason}\\n' -H \"X-Forwarded-For: 10.0.0.$i\" %s/; done\n", bfe1.URL)
	fmt.Fprintf(&b, "  2. The weight matrix:\n     %s weights get --cluster demo-main\n", lbctl)
	fmt.Fprintf(&b, "  3. Shift 30%% of BFE1's demo-main traffic from IDC1 to IDC2 and wait until every proxy has it:\n     %s shift --cluster demo-main --proxy-cluster BFE1 --from IDC1 --to IDC2 --percent 30 --wait\n", lbctl)
	fmt.Fprintf(&b, "  4. Rollout status of every proxy:\n     %s rollout status\n", lbctl)
	fmt.Fprintf(&b, "  5. Where would a request go, and why:\n     %s explain --proxy %s --proxy-cluster BFE1 --url http://demo.local/static/app.js --client-ip 10.1.2.3\n", lbctl, strings.TrimPrefix(bfe1.AdminURL, "http://"))
	fmt.Print(b.String())
}
