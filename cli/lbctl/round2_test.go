package lbctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/codec"
	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/poll"
	"github.com/sluicelb/sluice/testkit/syncbuf"
)

// normalise replaces what differs between machines and runs (the author
// lbctl records, temporary directories) so outputs can be golden.
func normalise(s string, dirs ...string) string {
	s = strings.ReplaceAll(s, defaultAuthor(), "AUTHOR")
	for _, d := range dirs {
		s = strings.ReplaceAll(s, d, "DIR")
	}
	return s
}

// Global flags are accepted before or after the command, and a command's
// own flag of the same name wins after it.
func TestGlobalFlagsBeforeOrAfterTheCommand(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 3, map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}, true))
	ep := strings.Join(h.srv.Endpoints, ",")
	var want string
	for i, args := range [][]string{
		{"lbctl", "--endpoints", ep, "-o", "json", "weights", "get"},
		{"lbctl", "weights", "get", "-o", "json", "--endpoints", ep},
		{"lbctl", "weights", "--endpoints", ep, "get", "--output=json", "--timeout", "5s"},
		{"lbctl", "weights", "get", "--cluster", "demo-main", "--endpoints=" + ep, "-o", "json", "--prefix", "/sluice"},
	} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb, strings.NewReader("")); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var m matrix
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("%v: not JSON: %v\n%s", args, err, out.String())
		}
		if i == 0 {
			want = out.String()
		} else if out.String() != want {
			t.Errorf("%v printed\n%s\nwant\n%s", args, out.String(), want)
		}
	}
	// rollout status --version is the command's target version, not the
	// global --version.
	out, errs, code := h.run("", "rollout", "status", "--proxy-cluster", "BFE1", "--version", "3", "-o", "json")
	if code != ExitNotConverged || !strings.Contains(out, `"BFE1": 3`) {
		t.Fatalf("rollout status --version 3: exit %d\n%s\n%s", code, out, errs)
	}
}

// A word that names no command is a usage error (exit 2) with a
// suggestion; nothing runs and no help page is printed instead.
func TestUnknownCommandsExit2WithASuggestion(t *testing.T) {
	h := newHarness(t)
	var got strings.Builder
	for _, args := range [][]string{
		{"rollout", "stat"},
		{"get", "configs"},
		{"bfe", "imprt"},
		{"weigths", "get"},
		{"-o", "json", "shift", "lst"},
		{"frobnicate"},
		{"weights", "get", "extra"},
	} {
		out, errs, code := h.run("", args...)
		fmt.Fprintf(&got, "$ lbctl %s\nexit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	golden(t, "unknown-commands", got.String())
}

func TestVersionFlagAndCommandAgree(t *testing.T) {
	h := newHarness(t)
	a := h.mustRun("version")
	b := h.mustRun("--version")
	if a != b || a != "lbctl "+Version+"\n" {
		t.Fatalf("lbctl version %q, lbctl --version %q", a, b)
	}
	if got := h.mustRun("version", "-o", "json"); got != "{\n  \"version\": \""+Version+"\"\n}\n" {
		t.Fatalf("version -o json: %q", got)
	}
}

// A flag that takes one value, given twice, is refused before anything is
// written: drain --subcluster SC1 --subcluster SC2 used to drain only SC2.
func TestRepeatedOneValueFlagIsRefused(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	_, errs, code := h.run("", "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--subcluster", "SC2")
	want := "lbctl: --subcluster given twice (\"SC1\" and \"SC2\"); it takes one value: run lbctl drain once per value\n"
	if code != ExitUsage || errs != want {
		t.Fatalf("exit %d, stderr %q, want %q", code, errs, want)
	}
	if _, rev2 := h.desired(); rev2 != rev {
		t.Fatal("a refused drain wrote the desired state")
	}
	// The same for a global flag given before and after the command.
	if _, errs, code := h.run("", "-o", "json", "get", "config", "-o", "yaml"); code != ExitUsage || !strings.Contains(errs, "--output given twice") {
		t.Fatalf("-o twice: exit %d %s", code, errs)
	}
	// Repeatable flags stay repeatable.
	if _, errs, code := h.run("", "explain", "--config", "testdata/static.yaml", "--proxy-cluster", "BFE1", "--url", "http://demo.local/",
		"--header", "A:1", "--header", "B:2"); code != 0 {
		t.Fatalf("repeated --header: exit %d %s", code, errs)
	}
}

// Errors name the objects the user named and the flags to pass.
func TestErrorsInTheUsersWords(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	dir := t.TempDir()
	dup := filepath.Join(dir, "dup.yaml")
	os.WriteFile(dup, []byte(strings.Replace(mustRead(t, "testdata/demo.yaml"), "      SC2: {idc: IDC2}\n", "      SC2: {idc: IDC2}\n      SC1: {idc: IDC2}\n", 1)), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(mustRead(t, "testdata/demo.yaml"), "SC1: 45", "SC1: 55", 1)), 0o644)
	var got strings.Builder
	for _, args := range [][]string{
		{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=50", "SC3=50"},
		{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "GSLB_BLACKHOLE=100"},
		{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE9", "SC1=50", "SC2=50"},
		{"weights", "set", "SC1=50", "SC2=50"},
		{"drain", "--cluster", "demo-main", "--subcluster", "SC9"},
		{"validate", dup},
		{"validate", bad},
		{"apply", "-f", bad, "--yes"},
	} {
		out, errs, code := h.run("", args...)
		fmt.Fprintf(&got, "$ lbctl %s\nexit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	golden(t, "user-words", normalise(got.String(), dir))
	if _, rev2 := h.desired(); rev2 != rev {
		t.Fatal("a rejected command wrote the desired state")
	}
}

// Writes print what they wrote, in the format -o asks for.
func TestWritesPrintWhatTheyWrote(t *testing.T) {
	h := newHarness(t)
	var got strings.Builder
	step := func(args ...string) {
		t.Helper()
		out, errs, code := h.run("", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		fmt.Fprintf(&got, "$ lbctl %s\n%s", strings.Join(args, " "), out)
	}
	step("apply", "-f", "testdata/demo.yaml", "--yes", "-o", "json")
	step("apply", "-f", "testdata/demo.yaml", "--yes", "-o", "yaml")
	step("weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=20", "SC2=80", "--reason", "test", "-o", "json")
	step("weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=30", "SC2=70", "-o", "yaml")
	step("weights", "unpin", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "-o", "json")
	step("drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "maintenance", "-o", "json")
	step("get", "drains")
	step("get", "drains", "-o", "json")
	step("get", "drains", "--cluster", "demo-main", "-o", "yaml")
	step("undrain", "--cluster", "demo-main", "--subcluster", "SC1")
	step("get", "drains")
	golden(t, "writes", normalise(got.String()))
}

func TestGetShiftsAndSnapshot(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	sh := config.Shift{ID: "shift-1", ProxyCluster: "BFE1", Cluster: "demo-main", From: "IDC1", To: "IDC2", Percent: 30,
		Ramp: config.Duration(5 * time.Minute), StepPercent: 10, State: config.ShiftRunning, Author: "test",
		CreatedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	b, _ := json.Marshal(sh)
	k, _ := h.layout.Shift(sh.ID)
	h.cli.Put(context.Background(), k, string(b))
	pk, _ := h.layout.ShiftProgress(sh.ID)
	pb, _ := json.Marshal(config.ShiftProgress{ID: sh.ID, AppliedPercent: 10, TargetPercent: 30, State: config.ShiftRunning, Version: 5})
	h.cli.Put(context.Background(), pk, string(pb))
	h.publish(demoSnapshot("BFE1", 4, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.publish(demoSnapshot("BFE1", 5, map[string]int{"SC1": 40, "SC2": 60}, false))

	var got strings.Builder
	for _, args := range [][]string{
		{"get", "shifts"},
		{"get", "shifts", "-o", "json"},
		{"shift", "list", "-o", "yaml"},
		{"get", "snapshot", "--proxy-cluster", "BFE1", "--version", "4"},
	} {
		fmt.Fprintf(&got, "$ lbctl %s\n%s", strings.Join(args, " "), h.mustRun(args...))
	}
	golden(t, "get-shifts-snapshot", got.String())

	// The live snapshot as JSON is a file validate accepts.
	f := filepath.Join(t.TempDir(), "snap.json")
	os.WriteFile(f, []byte(h.mustRun("get", "snapshot", "--proxy-cluster", "BFE1", "-o", "json")), 0o644)
	if out := h.mustRun("validate", f); !strings.HasSuffix(out, "valid snapshot (BFE1 v5)\n") {
		t.Fatalf("validate of get snapshot's output: %s", out)
	}
	want := `{"file":"` + f + `","valid":true,"kind":"snapshot","proxy_cluster":"BFE1","version":5}`
	if out := h.mustRun("validate", f, "-o", "json"); strings.Join(strings.Fields(out), "") != strings.Join(strings.Fields(want), "") {
		t.Fatalf("validate -o json: %s, want %s", out, want)
	}
	if _, errs, code := h.run("", "get", "snapshot", "--proxy-cluster", "BFE9"); code != ExitError ||
		!strings.Contains(errs, `no snapshot has been published for proxy cluster "BFE9" (the proxy clusters with one are BFE1)`) {
		t.Fatalf("unknown proxy cluster: exit %d %s", code, errs)
	}
}

// Every documented exit code, from the command that documents it.
func TestExitCodes(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("topology: {idcs: []}\nnope: 1\n"), 0o644)
	changed := filepath.Join(t.TempDir(), "changed.yaml")
	os.WriteFile(changed, []byte(strings.Replace(mustRead(t, "testdata/demo.yaml"), "instance_grace: 5s", "instance_grace: 6s", 1)), 0o644)
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 1, EtcdConnected: true, UpdatedAt: time.Now()})
	h.publish(demoSnapshot("BFE1", 2, map[string]int{"SC1": 50, "SC2": 50}, false))
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
	}{
		{"", []string{"version"}, ExitOK},
		{"", []string{"validate", bad}, ExitError},
		{"", []string{"rollout", "stat"}, ExitUsage},
		{"", []string{"weights", "get", "--bogus"}, ExitUsage},
		{"", []string{"apply", "-f", changed, "--yes", "--expect-revision", itoa(rev - 1)}, ExitConflict},
		{"", []string{"rollout", "status", "--proxy-cluster", "BFE1"}, ExitNotConverged},
		{"n\n", []string{"apply", "-f", changed}, ExitAborted},
		{"", []string{"help", "weights"}, ExitOK},
		{"", []string{"weights", "set", "--help"}, ExitOK}, // required flags are not asked for with --help
		{"", []string{"weights", "-h"}, ExitOK},
	} {
		if _, errs, code := h.run(c.stdin, c.args...); code != c.code {
			t.Errorf("lbctl %v: exit %d, want %d\n%s", c.args, code, c.code, errs)
		}
	}
}

// weights get --watch prints the matrix again when a new snapshot goes
// live, and ends with exit 0 when its context ends and on SIGINT.
func TestWeightsGetWatch(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 3, map[string]int{"SC1": 45, "SC2": 55}, false))
	ep := strings.Join(h.srv.Endpoints, ",")
	for _, stop := range []string{"context", "SIGINT"} {
		t.Run(stop, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errb syncbuf.Buffer
			done := make(chan int, 1)
			go func() {
				done <- MainContext(ctx, []string{"lbctl", "weights", "get", "--watch", "--endpoints", ep}, &out, &errb, strings.NewReader(""))
			}()
			poll.EventuallyTrue(t, 20*time.Second, "the first table", func() bool { return strings.Contains(out.String(), "BFE1") })
			v := uint64(4)
			if stop == "SIGINT" {
				v = 5
			}
			h.publish(demoSnapshot("BFE1", v, map[string]int{"SC1": 30, "SC2": 70}, false))
			poll.EventuallyTrue(t, 20*time.Second, "the redraw", func() bool { return strings.Contains(out.String(), fmt.Sprintf("v%d", v)) })
			if stop == "SIGINT" {
				syscall.Kill(os.Getpid(), syscall.SIGINT)
			} else {
				cancel()
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errb.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the watch did not end")
			}
			if n := strings.Count(out.String(), "CLUSTER demo-main"); n != 2 {
				t.Fatalf("%d tables, want 2 (one per live version):\n%s", n, out.String())
			}
		})
	}
}

// With --timeout given, a watch ends (exit 0) when it has passed.
func TestWatchEndsAfterAnExplicitTimeout(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 3, map[string]int{"SC1": 45, "SC2": 55}, false))
	start := time.Now()
	// 2 s: the first read of the weights is inside the timeout, and it can
	// take most of a shorter one on a loaded machine (500 ms flaked).
	out, errs, code := h.run("", "weights", "get", "--watch", "--timeout", "2s")
	if code != 0 || strings.Count(out, "CLUSTER demo-main") != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if d := time.Since(start); d < 2*time.Second || d > 20*time.Second {
		t.Fatalf("the watch ended after %s, want about 2s", d)
	}
}

// The completion scripts are valid shell and complete commands,
// subcommands and flags.
func TestCompletionScripts(t *testing.T) {
	h := newHarness(t)
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	for _, sh := range []string{"bash", "zsh"} {
		script := h.mustRun("completion", sh)
		f := filepath.Join(dir, "lbctl."+sh)
		os.WriteFile(f, []byte(script), 0o644)
		if out, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
			t.Fatalf("%s script: bash -n: %v\n%s", sh, err, out)
		}
		for _, cmd := range []string{"weights", "rollout", "completion", "get", "bfe"} {
			if !strings.Contains(script, cmd) {
				t.Errorf("%s script does not list %s", sh, cmd)
			}
		}
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := fmt.Sprintf("source %s\nCOMP_WORDS=(%s)\nCOMP_CWORD=%d\n_lbctl\necho \"${COMPREPLY[*]}\"\n",
			filepath.Join(dir, "lbctl.bash"), strings.Join(quoteAll(words), " "), len(words)-1)
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("complete %v: %v\n%s", words, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"lbctl", "wei"}, "weights"},
		{[]string{"lbctl", "weights", ""}, "get set unpin"},
		{[]string{"lbctl", "-o", "json", "rollout", "s"}, "status"},
		{[]string{"lbctl", "get", "--timeout", "2s", "sn"}, "snapshot"},
		{[]string{"lbctl", "drain", "--sub"}, "--subcluster"},
		{[]string{"lbctl", "completion", "help", ""}, ""},
	} {
		got := complete(c.words...)
		if c.want == "" {
			continue
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("completing %q: %q, want it to start with %q", c.words, got, c.want)
		}
	}
	if _, errs, code := h.run("", "completion", "fish"); code != ExitUsage || !strings.Contains(errs, `"fish": want bash or zsh`) {
		t.Fatalf("completion fish: exit %d %s", code, errs)
	}
}

func quoteAll(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = "'" + w + "'"
	}
	return out
}

// plan's table says BLACKHOLE, like weights get; GSLB_BLACKHOLE is for BFE
// files and weight specs.
func TestPlanTableSaysBlackhole(t *testing.T) {
	var d planDoc
	if err := json.Unmarshal([]byte(`{"what_if":true,"proxy_clusters":{"BFE1":{"live_version":3,"rows":{"demo-main":{
		"row":{"denominator":100,"weights":{"SC1":45,"SC2":45,"GSLB_BLACKHOLE":10}},"explanation":{"mode":"pinned"}}}}},
		"clusters":{"demo-main":{"Utilisation":{"SC1":0.5,"SC2":0.25}}}}`), &d); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	e := &env{out: &b, format: "table"}
	if err := e.render(nil, func(w io.Writer) error { return d.table(w, "") }); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-table", b.String())
}

// proxies --watch -o json prints one JSON document per change of a proxy's
// status, and ends with exit 0 with its context.
func TestProxiesWatchJSON(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 2, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 1, EtcdConnected: true, UpdatedAt: time.Now()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errb, done := h.start(ctx, "proxies", "-w", "-o", "json")
	docs := func() []report.ProxyStatus {
		var all []report.ProxyStatus
		d := json.NewDecoder(strings.NewReader(out.String()))
		for {
			var sts []report.ProxyStatus
			if d.Decode(&sts) != nil {
				return all
			}
			all = append(all, sts...)
		}
	}
	poll.EventuallyTrue(t, 20*time.Second, "the first document", func() bool { return len(docs()) == 1 })
	h.status(report.ProxyStatus{ProxyCluster: "BFE1", ID: "p1", AppliedVersion: 2, EtcdConnected: true, UpdatedAt: time.Now()})
	poll.EventuallyTrue(t, 20*time.Second, "the second document", func() bool { return len(docs()) == 2 })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if d := docs(); d[0].AppliedVersion != 1 || d[1].AppliedVersion != 2 {
		t.Fatalf("documents %+v", d)
	}
}

// get config: the table format is YAML with the revision in a comment;
// -o yaml is the document alone, -o json the same document as JSON.
func TestGetConfigFormats(t *testing.T) {
	h := newHarness(t)
	h.applyDemo()
	_, rev := h.desired()
	table := h.mustRun("get", "config")
	y := h.mustRun("get", "config", "-o", "yaml")
	if table != fmt.Sprintf("# revision %d\n", rev)+y || strings.HasPrefix(y, "#") {
		t.Fatalf("table:\n%s\nyaml:\n%s", table, y)
	}
	var fromYAML, fromJSON config.State
	if err := codec.Unmarshal([]byte(y), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if err := codec.Unmarshal([]byte(h.mustRun("get", "config", "-o", "json")), &fromJSON); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromYAML)
	b, _ := json.Marshal(fromJSON)
	if string(a) != string(b) {
		t.Fatalf("yaml and json differ:\n%s\n%s", a, b)
	}
}

// history and diff in every format.
func TestHistoryAndDiffFormats(t *testing.T) {
	h := newHarness(t)
	h.publish(demoSnapshot("BFE1", 1, map[string]int{"SC1": 50, "SC2": 50}, false))
	h.publish(demoSnapshot("BFE1", 2, map[string]int{"SC1": 40, "SC2": 50, config.Blackhole: 10}, true))
	var got strings.Builder
	for _, args := range [][]string{
		{"history", "--proxy-cluster", "BFE1"},
		{"history", "--proxy-cluster", "BFE1", "-o", "yaml"},
		{"diff", "--proxy-cluster", "BFE1", "1", "2"},
		{"diff", "--proxy-cluster", "BFE1", "v1", "v2", "-o", "json"},
		{"weights", "get", "-o", "yaml"},
	} {
		fmt.Fprintf(&got, "$ lbctl %s\n%s", strings.Join(args, " "), h.mustRun(args...))
	}
	golden(t, "history-diff-formats", got.String())
}
