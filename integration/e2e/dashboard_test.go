//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/sluicelb/sluice/integration/fleet"
)

// chromium finds the browser. Under CI=true a missing browser fails the
// test (.ci/run installs it); elsewhere the test is skipped with the fix.
func chromium(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed and CI=true: .ci/run installs it (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: apt-get install -y chromium")
	return ""
}

// artefactDir is where screenshots go: $SLUICE_ARTIFACTS when set, else the
// test's temporary directory.
func artefactDir(t *testing.T) string {
	if d := os.Getenv("SLUICE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// Scenario: the dashboard in headless Chromium over the dev fleet. It renders
// the demo matrix (BFE1 pinned 45/45/10), follows lbctl weights set within
// 2 s without a reload, marks a drained sub-cluster, refuses an action
// without the token, and works at phone width.
func TestDashboardInBrowser(t *testing.T) {
	exe := chromium(t)
	f := startFleet(t, fleet.Options{})
	waitInstances(t, f, "BFE1", "demo-main", demoMainFull)
	waitApplied(t, f, "BFE1", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	bctx := browser(t, ctx, exe)

	url := f.SchedAPIs[0] + "/ui/"
	cell := func(pc, sc string) string { return fmt.Sprintf(`td[data-cell="demo-main/%s/%s"]`, pc, sc) }
	openDashboard(t, bctx, url, cell("BFE1", "SC1"))
	// The page re-renders on every event, so read in one step in the page
	// (a node looked up first may be replaced before it is read).
	text := func(sel string) string {
		s, err := chromedp.Run(bctx, innerText(sel))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	for sc, want := range map[string]string{"SC1": "45", "SC2": "45", "GSLB_BLACKHOLE": "10"} {
		if got := text(cell("BFE1", sc)); got != want {
			t.Errorf("BFE1 → %s shows %q, want %q", sc, got, want)
		}
	}
	if marks := text(`tr[data-row="demo-main/BFE1"]`); !strings.Contains(marks, "PINNED") {
		t.Errorf("BFE1 row is not marked pinned: %q", marks)
	}
	waitText := func(sel, what string, d time.Duration, ok func(string) bool) time.Duration {
		return waitInPage(t, bctx, sel, what, d, ok)
	}

	// Traffic: under load, the proxies' demand reports (every 5 s) reach the
	// BFE1 → demo-main chart (sampled every 5 s).
	lctx, lstop := context.WithCancel(ctx)
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for i := 0; lctx.Err() == nil; i++ {
			splitLoad(f, "BFE1", 200, 300000+200*i)
		}
	}()
	waitText(`div[data-traffic="BFE1/demo-main"]`, "BFE1 → demo-main traffic above 0 req/s", 30*time.Second, func(s string) bool {
		return strings.Contains(s, " req/s") && !strings.Contains(s, "now: 0.0 req/s")
	})
	if n := countSel(t, bctx, `div[data-traffic="BFE1/demo-main"] svg polyline:not(.l-share)`); n != 3 {
		t.Errorf("BFE1 → demo-main chart has %d lines, want 3", n)
	}
	// The realised share per sub-cluster beside the intended row (45/45/10),
	// from the proxies' per-sub-cluster counts, and a solid and a dashed line
	// per sub-cluster. The load spreads client addresses evenly over the
	// consistent hash, so thousands of answers land within 10 points.
	realisedSel := `p[data-realised="BFE1/demo-main"]`
	waitText(realisedSel, "BFE1 → demo-main realised share beside the intended one", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "realised share of the last ") && strings.Contains(s, "SC1 ") && strings.Contains(s, "(intended 45.0%)") &&
			strings.Contains(s, "BLACKHOLE ") && strings.Contains(s, "(intended 10.0%)")
	})
	if n := countSel(t, bctx, `div[data-traffic="BFE1/demo-main"] svg polyline.l-share`); n != 6 {
		t.Errorf("BFE1 → demo-main share chart has %d lines, want 6 (realised and intended for SC1, SC2, BLACKHOLE)", n)
	}
	eventually(t, 30*time.Second, "BFE1 → demo-main realised within 10 points of 45/45/10 over 500+ answers", func() error {
		return realisedNear(t, f, "BFE1", "demo-main", map[string]float64{"SC1": 45, "SC2": 45, "GSLB_BLACKHOLE": 10}, 10)
	})
	lstop()
	<-loaded
	dir := artefactDir(t)
	shot := func(name string) {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", p, len(png))
	}
	shot("dashboard-1280.png")

	// The row explanation, by keyboard: focus BFE1's name, press Enter.
	explainBtn := `button[data-key="explain/demo-main/BFE1"]`
	// Focus in one step in the page (a live update may replace the node
	// between a lookup and a focus; the page keeps focus across updates).
	focus := chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; e.focus(); return document.activeElement === e })(document.querySelector(%q))`, explainBtn))
	if ok, err := chromedp.Run(bctx, focus); err != nil || !ok {
		t.Fatalf("focus %s: %v %v", explainBtn, ok, err)
	}
	if err := chromedp.Do(bctx, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatalf("open the explanation with the keyboard: %v", err)
	}
	waitPresent(t, bctx, "#explain-body dl")
	if x := text("#explain-body"); !strings.Contains(x, "mode") || !strings.Contains(x, "pinned") || !strings.Contains(x, "SC1=45 SC2=45 GSLB_BLACKHOLE=10") {
		t.Errorf("explanation of BFE1/demo-main: %q", x)
	}

	// Mark the page: a reload would lose the mark.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument = 1`)); err != nil {
		t.Fatal(err)
	}
	out, code, err := f.Lbctl(ctx, "weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE1", "SC1=30", "SC2=60", "GSLB_BLACKHOLE=10", "--reason", "e2e dashboard")
	if err != nil || code != 0 {
		t.Fatalf("lbctl weights set: exit %d, %v\n%s", code, err, out)
	}
	took := waitText(cell("BFE1", "SC1"), "BFE1 → SC1 shows 30 after lbctl weights set", 2*time.Second, func(s string) bool { return s == "30" })
	t.Logf("lbctl weights set → cell updated in %s", took)
	if got := text(cell("BFE1", "SC2")); got != "60" {
		t.Errorf("BFE1 → SC2 shows %q after the pin, want 60", got)
	}
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument || 0`)); err != nil || same != 1 {
		t.Fatalf("the page reloaded (mark %d, %v)", same, err)
	}
	if f, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.activeElement.getAttribute("data-key") || ""`)); err != nil || f != "explain/demo-main/BFE1" {
		t.Errorf("keyboard focus after a live update is on %q (%v), want the button it was on", f, err)
	}
	if x := text("#explain-body"); !strings.Contains(x, "SC1=30 SC2=60 GSLB_BLACKHOLE=10") {
		t.Errorf("the open explanation did not follow the new row: %q", x)
	}

	// The version history: the newest two versions' rows that differ.
	if err := chromedp.Do(bctx, click(`button[data-key="history/BFE1"]`), chromedp.WaitVisible(chromedp.CSS("#diff-go"))); err != nil {
		t.Fatalf("open BFE1's history: %v", err)
	}
	waitText("#history-body", "BFE1's versions with reasons", 5*time.Second, func(s string) bool { return strings.Contains(s, "initial snapshot") })
	if err := chromedp.Do(bctx, click("#diff-go")); err != nil {
		t.Fatal(err)
	}
	waitText(`#diff-out`, "the diff row of demo-main", 5*time.Second, func(s string) bool {
		return strings.Contains(s, "SC1=45 SC2=45 GSLB_BLACKHOLE=10 (pinned)") && strings.Contains(s, "SC1=30 SC2=60 GSLB_BLACKHOLE=10 (pinned)")
	})

	out, code, err = f.Lbctl(ctx, "drain", "--cluster", "demo-main", "--subcluster", "SC2", "--reason", "e2e dashboard drain")
	if err != nil || code != 0 {
		t.Fatalf("lbctl drain: exit %d, %v\n%s", code, err, out)
	}
	// The drain reaches the page by the path of the weights above (the
	// desired state's watch), whose 2 s is the claim; here the mark is, and
	// 10 s a safety net (2 s failed once at load 28, the history dialog open).
	took = waitText(`th[data-sub="demo-main/SC2"]`, "SC2 marked DRAINED", 10*time.Second, func(s string) bool { return strings.Contains(s, "DRAINED") })
	t.Logf("lbctl drain → column marked in %s", took)
	if title, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(`th[data-sub="demo-main/SC2"]`), "title")); err != nil || !strings.Contains(title.Value, "e2e dashboard drain") {
		t.Errorf("SC2 header title %q (%v): want the drain reason", title.Value, err)
	}
	if got := text(`tr[data-health="demo-main/SC2"]`); !strings.Contains(got, "DRAINED") {
		t.Errorf("health row of SC2 not marked drained: %q", got)
	}
	shot("dashboard-drained-1280.png")

	// An action without the token is refused (the fleet's scheduler has
	// none: the dashboard is read-only), and nothing changes.
	type answer struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	res, err := chromedp.Run(bctx, chromedp.Evaluate[answer](`sluiceAction({kind: "undrain", cluster: "demo-main", subcluster: "SC2"})`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(res.Error, "read-only") || res.Message != "" {
		t.Fatalf("action without token: %+v %v", res, err)
	}
	out, code, err = f.Lbctl(ctx, "drain", "--cluster", "demo-main", "--subcluster", "SC2")
	if code == 0 || !strings.Contains(out, "already drained") {
		t.Fatalf("SC2 should still be drained after the refused undrain: exit %d %v\n%s", code, err, out)
	}
	if n := countSel(t, bctx, "button[data-key^=drain], button[data-key^=pin]"); n != 0 {
		t.Errorf("a read-only dashboard shows %d action buttons", n)
	}

	// Phone width: the page itself does not scroll sideways (the matrix
	// scrolls inside its own box), and the cells are still there. (With SC2
	// drained, the pinned row's SC2 share went to SC1.)
	wide := text(cell("BFE1", "SC1"))
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	if overflow, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)); err != nil || overflow {
		t.Errorf("page wider than a 390 px screen (overflow %v, %v)", overflow, err)
	}
	if got := text(cell("BFE1", "SC1")); got != wide || got == "" {
		t.Errorf("phone width: BFE1 → SC1 shows %q, at 1280 px %q", got, wide)
	}
	shot("dashboard-390.png")
}

func countSel(t *testing.T, ctx context.Context, sel string) int {
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// innerText reads the text of the first element matching sel.
func innerText(sel string) chromedp.Action[string] {
	return chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel))
}

// browser starts headless Chromium for the test (stopped at cleanup).
func browser(t *testing.T, ctx context.Context, exe string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel()
	})
	return bctx
}

// openDashboard loads url and polls, in one step in the page each time,
// until an element matches sel (within 30 s). It does not use WaitVisible:
// the live page replaces its nodes on every document, and a node looked up
// first may be gone before it is checked.
func openDashboard(t *testing.T, bctx context.Context, url, sel string) {
	t.Helper()
	// bctx itself, not a context derived from it: the first action on a
	// chromedp context starts the browser, which then lives as long as
	// that context (the test's deadline bounds it).
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	waitPresent(t, bctx, sel)
}

// waitPresent polls, in one step in the page each time, until an element
// matches sel (within 30 s).
func waitPresent(t *testing.T, bctx context.Context, sel string) {
	t.Helper()
	present := fmt.Sprintf(`document.querySelector(%q) !== null`, sel)
	start := time.Now()
	for {
		tctx, tcancel := context.WithTimeout(bctx, time.Second)
		ok, err := chromedp.Run(tctx, chromedp.Evaluate[bool](present))
		tcancel()
		if err == nil && ok {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("nothing matches %s within 30 s (last error %v)", sel, err)
		}
		time.Sleep(25 * time.Millisecond) // poll interval of the DOM, not a wait for state
	}
}

// waitInPage polls the DOM until sel's text satisfies ok, within d; it
// returns how long that took.
func waitInPage(t *testing.T, bctx context.Context, sel, what string, d time.Duration, ok func(string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	var lastErr error // a read of the page that failed (Chromium slow under load) reads ""
	for time.Since(start) < d {
		tctx, tcancel := context.WithTimeout(bctx, time.Second)
		s, err := chromedp.Run(tctx, innerText(sel))
		tcancel()
		if last, lastErr = strings.TrimSpace(s), err; err == nil && ok(last) {
			return time.Since(start)
		}
		time.Sleep(25 * time.Millisecond) // poll interval of the DOM, not a wait for state
	}
	t.Fatalf("%s: not within %s (last %q, read error %v)", what, d, last, lastErr)
	return 0
}

// Scenario: with the scheduler's API token typed into the page, an operator
// drains a sub-cluster and unpins a row through the confirmation dialog; a
// refused pin shows lbctl's words in the dialog and changes nothing.
func TestDashboardActionsInBrowser(t *testing.T) {
	exe := chromium(t)
	f := startFleet(t, fleet.Options{Env: []string{"SLUICE_SCHEDULER_API_TOKEN=e2e-token"}})
	waitApplied(t, f, "BFE1", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx := browser(t, ctx, exe)
	wait := func(sel, what string, ok func(string) bool) { waitInPage(t, bctx, sel, what, 5*time.Second, ok) }
	has := func(sub string) func(string) bool { return func(s string) bool { return strings.Contains(s, sub) } }

	drainBtn := `button[data-key="drain/demo-main/SC2"]`
	openDashboard(t, bctx, f.SchedAPIs[0]+"/ui/", "#token")
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "e2e-token"), click(`#tokenform button[type=submit]`)); err != nil {
		t.Fatalf("enter the token: %v", err)
	}
	waitPresent(t, bctx, drainBtn)
	// Drain: the dialog asks first; Confirm writes it. Its box "allow a
	// full drop" is lbctl drain's --allow-full-drop (nothing is left with
	// nothing to serve here: it is stored all the same, as lbctl stores it).
	if err := chromedp.Do(bctx, click(drainBtn), chromedp.WaitVisible(chromedp.CSS("#action-reason")),
		chromedp.SendKeys(chromedp.CSS("#action-reason"), "e2e from the page"), click("#allow-full-drop")); err != nil {
		t.Fatalf("open the drain dialog: %v", err)
	}
	wait("#confirm-body", "the drain confirmation", has("Drain demo-main/SC2"))
	if err := chromedp.Do(bctx, click("#confirm-ok")); err != nil {
		t.Fatal(err)
	}
	wait("#notice", "the drain's answer", has("Drained demo-main/SC2 (desired state revision "))
	// Written is not live: the answer says so, and the page says when every
	// proxy runs it (the proxy clusters' live_revision reached the drain's).
	wait("#notice", "the drain's answer says it is not live yet",
		has("Written to the desired state only: not live until the scheduler publishes it and the proxies apply it."))
	waitInPage(t, bctx, "#notice-live", "the drain live on every proxy", 30*time.Second,
		has("that counts runs a snapshot computed from revision "))
	wait(`th[data-sub="demo-main/SC2"]`, "SC2 marked DRAINED", has("DRAINED"))
	drained := desiredRevision(t, mustText(t, bctx, "#notice"))
	if out, code, err := f.Lbctl(ctx, "get", "drains"); err != nil || code != 0 ||
		!regexp.MustCompile(`(?m)^demo-main\s+SC2\s+allowed\s+e2e from the page\s`).MatchString(out) {
		t.Fatalf("lbctl get drains after the page's drain with its box ticked: exit %d %v\n%s\nwant SC2 with FULL DROP allowed", code, err, out)
	}
	out, code, _ := f.Lbctl(ctx, "undrain", "--cluster", "demo-main", "--subcluster", "SC2")
	if code != 0 {
		t.Fatalf("the page's drain is not in etcd: lbctl undrain exit %d\n%s", code, out)
	}
	// A later write made elsewhere: the line no longer says the drain is the
	// current state; it keeps when the drain was seen live and follows the
	// undrain's revision until every proxy runs it.
	undrained := desiredRevision(t, out)
	movedOn := regexp.MustCompile(fmt.Sprintf(`^Live at .+ \(revision %d\)\. Desired state now at revision %d, written after this page's write of revision %d: `+
		`live at .+: every proxy that counts runs a snapshot computed from revision %d or later\.$`, drained, undrained, drained, undrained))
	waitInPage(t, bctx, "#notice-live", "the line follows lbctl's later undrain to live", 30*time.Second, movedOn.MatchString)
	t.Logf("after lbctl undrain: %s", mustText(t, bctx, "#notice-live"))

	// A pin that does not sum to 100 is refused in the dialog, in lbctl's words.
	pinBtn := `button[data-key="pin/demo-main/BFE1"]`
	waitPresent(t, bctx, pinBtn)
	if err := chromedp.Do(bctx, click(pinBtn),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-body input[data-w="SC1"]`)),
		chromedp.SetValue(chromedp.CSS(`#confirm-body input[data-w="SC1"]`), "50"), click("#confirm-ok")); err != nil {
		t.Fatalf("pin dialog: %v", err)
	}
	wait("#confirm-error", "the refused pin's error", has("invalid change; nothing was written:"))
	if err := chromedp.Do(bctx, click("#confirm-cancel")); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(mustText(t, bctx, `td[data-cell="demo-main/BFE1/SC1"]`)); got != "45" {
		t.Fatalf("after the refused pin BFE1 → SC1 shows %q, want 45", got)
	}

	// Unpin through the dialog: the row is computed again.
	unpinBtn := `button[data-key="unpin/demo-main/BFE1"]`
	if err := chromedp.Do(bctx, click(unpinBtn), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")),
		click("#confirm-ok")); err != nil {
		t.Fatalf("unpin: %v", err)
	}
	wait("#notice", "the unpin's answer", has("Unpinned BFE1 row of demo-main"))
	// A later write from the page replaces the line: the unpin's own
	// progress, on BFE1 only, and nothing of the earlier writes.
	unpinned := desiredRevision(t, mustText(t, bctx, "#notice"))
	ownLive := regexp.MustCompile(fmt.Sprintf(`^Live at .+: every proxy of BFE1 that counts runs a snapshot computed from revision %d or later\.$`, unpinned))
	waitInPage(t, bctx, "#notice-live", "the unpin live on BFE1", 30*time.Second, ownLive.MatchString)
	t.Logf("after the unpin: %s", mustText(t, bctx, "#notice-live"))
	wait(`tr[data-row="demo-main/BFE1"]`, "BFE1 no longer pinned", func(s string) bool { return !strings.Contains(s, "PINNED") })

	// A shift with a ramp, from the row's Shift… dialog: the intent lbctl
	// shift writes, listed by lbctl and shown in the shifts table. (A ramp
	// of 10m: it is still running when the page pauses it below.)
	shiftBtn := `button[data-key="shift/demo-main/BFE1"]`
	if err := chromedp.Do(bctx, click(shiftBtn), chromedp.WaitVisible(chromedp.CSS("#shift-percent")),
		chromedp.SetValue(chromedp.CSS("#shift-percent"), "20"), chromedp.SetValue(chromedp.CSS("#shift-ramp"), "10m"),
		chromedp.SetValue(chromedp.CSS("#action-reason"), "e2e shift from the page"), click("#confirm-ok")); err != nil {
		t.Fatalf("shift dialog: %v", err)
	}
	wait("#notice", "the shift's answer", has("created: 20 points of BFE1's demo-main traffic from IDC1 to IDC2 over 10m0s in steps of 10 (revision "))
	wait("#shifts-body", "the shift in the shifts table", has("BFE1 → demo-main"))
	if out, code, err := f.Lbctl(ctx, "shift", "list"); err != nil || code != 0 || !strings.Contains(out, "BFE1") || !strings.Contains(out, "IDC1") {
		t.Fatalf("lbctl shift list after the page's shift: exit %d %v\n%s", code, err, out)
	}
	m := regexp.MustCompile(`^Shift (\S+) created: `).FindStringSubmatch(mustText(t, bctx, "#notice"))
	if m == nil {
		t.Fatalf("no shift id in the notice %q", mustText(t, bctx, "#notice"))
	}
	shiftStateInBrowser(t, bctx, f, m[1])
}

// shiftStateInBrowser: the page pauses, resumes and aborts shift id (of
// BFE1) through its buttons and the confirmation dialog. Each answer names
// the revision of its write to the shift intent, and the line under it
// follows that revision exactly as after a write of the desired state:
// never empty, rolling out, then live on BFE1. Each state offers only the
// buttons the scheduler takes (paused: resume, abort; running: pause,
// abort; aborted: none). A pause confirmed after lbctl paused the shift
// meanwhile is refused in the dialog in lbctl's words, saying nothing was
// written, and leaves the notice and the intent as they were. An answer naming no
// revision (the page's fetch answered by the test: the scheduler names the
// revision of every write) is said to have written nothing.
func shiftStateInBrowser(t *testing.T, bctx context.Context, f *fleet.Fleet, id string) {
	t.Helper()
	ctx := context.Background()
	quoted := regexp.QuoteMeta(id)
	open := func(verb string) {
		t.Helper()
		btn := fmt.Sprintf(`button[data-key="%s/%s"]`, verb, id)
		waitPresent(t, bctx, btn)
		if err := chromedp.Do(bctx, click(btn), chromedp.WaitVisible(chromedp.CSS("#confirm-ok"))); err != nil {
			t.Fatalf("%s dialog: %v", verb, err)
		}
		waitInPage(t, bctx, "#confirm-body", "the "+verb+" confirmation", 5*time.Second, func(s string) bool { return s == verb+" shift "+id+"." })
	}
	do := func(verb string) {
		t.Helper()
		open(verb)
		if err := chromedp.Do(bctx, click("#confirm-ok")); err != nil {
			t.Fatal(err)
		}
	}
	shiftState := func() string {
		t.Helper()
		out, code, err := f.Lbctl(ctx, "-o", "json", "shift", "list")
		if err != nil || code != 0 {
			t.Fatalf("lbctl shift list: exit %d %v\n%s", code, err, out)
		}
		var rows []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("lbctl shift list -o json: %v\n%s", err, out)
		}
		for _, r := range rows {
			if r.ID == id {
				return r.State
			}
		}
		t.Fatalf("lbctl shift list has no %s:\n%s", id, out)
		return ""
	}
	for _, c := range []struct{ verb, state string }{{"pause", "paused"}, {"resume", "running"}, {"abort", "aborted"}} {
		do(c.verb)
		answer := regexp.MustCompile(`^Shift ` + quoted + ` is now ` + c.state + ` \(revision (\d+)\)\. Not live until the scheduler runs it and the proxies of BFE1 apply it\.`)
		waitInPage(t, bctx, "#notice", "the "+c.verb+"'s answer", 5*time.Second, answer.MatchString)
		var rev int64
		if _, err := fmt.Sscan(answer.FindStringSubmatch(mustText(t, bctx, "#notice"))[1], &rev); err != nil {
			t.Fatal(err)
		}
		if got := shiftState(); got != c.state {
			t.Fatalf("after the page's %s lbctl shift list says %s is %s, want %s", c.verb, id, got, c.state)
		}
		// Never empty: the write's progress, then live on BFE1.
		rolling := fmt.Sprintf("Rolling out revision %d: not seen live yet on BFE1 (see Rollout).", rev)
		live := regexp.MustCompile(fmt.Sprintf(`^Live at .+: every proxy of BFE1 that counts runs a snapshot computed from revision %d or later\.$`, rev))
		if first := strings.TrimSpace(mustText(t, bctx, "#notice-live")); first != rolling && !live.MatchString(first) {
			t.Errorf("the %s's line at once: %q, want %q or %s", c.verb, first, rolling, live)
		}
		waitInPage(t, bctx, "#notice-live", "the "+c.verb+" live on BFE1", 30*time.Second, live.MatchString)
		t.Logf("after the page's %s: %s", c.verb, mustText(t, bctx, "#notice"))
		// Only the actions the scheduler takes in that state are offered.
		waitInPage(t, bctx, `tr[data-shift="`+id+`"] td:last-child`, "the "+c.state+" shift's buttons", 5*time.Second, func(s string) bool {
			return strings.Join(strings.Fields(s), " ") == map[string]string{"paused": "resume abort", "running": "pause abort", "aborted": ""}[c.state]
		})
		if c.verb != "resume" {
			continue
		}
		// Paused by someone else while the page's pause dialog is open:
		// refused in the dialog, nothing written, the notice still the
		// resume's.
		notice := mustText(t, bctx, "#notice")
		open("pause")
		if out, code, err := f.Lbctl(ctx, "shift", "pause", "--id", id); err != nil || code != 0 {
			t.Fatalf("lbctl shift pause: exit %d %v\n%s", code, err, out)
		}
		if err := chromedp.Do(bctx, click("#confirm-ok")); err != nil {
			t.Fatal(err)
		}
		want := "shift " + id + " is paused: cannot pause it (already paused); nothing was written"
		waitInPage(t, bctx, "#confirm-error", "the refused pause's error", 5*time.Second, func(s string) bool { return s == want })
		if err := chromedp.Do(bctx, click("#confirm-cancel")); err != nil {
			t.Fatal(err)
		}
		if got := mustText(t, bctx, "#notice"); got != notice {
			t.Errorf("the refused pause changed the notice: %q, was %q", got, notice)
		}
		if got := shiftState(); got != "paused" {
			t.Errorf("after the refused pause lbctl shift list says %s is %s, want paused", id, got)
		}
	}

	// An answer without a revision wrote nothing, and the line says so.
	stub := `(() => { const real = window.fetch; window.fetch = (url, o) => { if (String(url).endsWith('api/action')) { window.fetch = real;
		return Promise.resolve(new Response('{"message":"Answered by the test."}', { status: 200, headers: { 'Content-Type': 'application/json' } })); }
		return real(url, o); }; return true; })()`
	if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](stub)); err != nil || !ok {
		t.Fatalf("stub the page's fetch: %v", err)
	}
	drainBtn := `button[data-key="drain/demo-main/SC1"]`
	waitPresent(t, bctx, drainBtn)
	if err := chromedp.Do(bctx, click(drainBtn), chromedp.WaitVisible(chromedp.CSS("#confirm-ok")), click("#confirm-ok")); err != nil {
		t.Fatalf("drain dialog: %v", err)
	}
	waitInPage(t, bctx, "#notice", "the answer without a revision", 5*time.Second, func(s string) bool {
		return s == "Answered by the test. Nothing was written, so there is nothing to follow live."
	})
}

func mustText(t *testing.T, bctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(bctx, innerText(sel))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// click clicks the first element matching sel in one step in the page: the
// live page may re-render (and re-lay out) between a node's lookup and a
// mouse click at its coordinates.
func click(sel string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		ok, err := chromedp.Evaluate[bool](fmt.Sprintf(`(e => { if (!e) return false; e.click(); return true })(document.querySelector(%q))`, sel))(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("click: no element matches %s", sel)
		}
		return chromedp.Void{}, err
	}
}

// Scenario (issues 21 and 15): the dashboard and lbctl rollout status show
// one rollout truth. A BFE1 proxy killed with -9 turns STALE (last seen T)
// and then GONE (from its last-seen record) in the browser, and at each
// step the dashboard's states (/ui/api/state) equal lbctl rollout status's
// for every proxy, and both say the rollout is not converged.
func TestDashboardRolloutAgreesWithLbctl(t *testing.T) {
	exe := chromium(t)
	f, ctx := servingFleet(t)
	bctx := browser(t, ctx, exe)
	openDashboard(t, bctx, f.SchedAPIs[0]+"/ui/", `h3[data-rollout="BFE1"]`)
	victim := f.ProxiesOf("BFE1")[1]
	row := fmt.Sprintf(`tr[data-proxy="BFE1/%s"]`, victim.ID)
	waitInPage(t, bctx, row, victim.ID+" SYNCED in the page", 10*time.Second, func(s string) bool { return strings.Contains(s, "SYNCED") })
	agree(t, ctx, f, "before the kill", "SYNCED", victim.ID)

	victim.Proc.Kill()
	killed := time.Now()
	took := waitInPage(t, bctx, row, victim.ID+" STALE (last seen …) in the page", 40*time.Second, func(s string) bool {
		return strings.Contains(s, "STALE") && strings.Contains(s, "last seen ")
	})
	t.Logf("killed proxy STALE in the page after %s", took.Round(100*time.Millisecond))
	if took > 12*time.Second {
		t.Errorf("the page showed the killed proxy as not SYNCED after %s; want ≤ 12 s", took)
	}
	agree(t, ctx, f, "after the kill", "STALE", victim.ID)
	waitInPage(t, bctx, row, victim.ID+" GONE in the page", 60*time.Second, func(s string) bool {
		return strings.Contains(s, "GONE") && strings.Contains(s, "status lease expired; last seen ")
	})
	t.Logf("killed proxy GONE in the page %s after the kill", time.Since(killed).Round(100*time.Millisecond))
	agree(t, ctx, f, "after the lease expired", "GONE", victim.ID)
	if h := mustText(t, bctx, `h3[data-rollout="BFE1"]`); strings.Contains(h, "converged") {
		t.Errorf("BFE1 heading says converged with a GONE proxy of this rollout: %q", h)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(artefactDir(t), "dashboard-gone-1280.png"), png, 0o644)
	}
	if err != nil {
		t.Errorf("screenshot: %v", err)
	}
}

// agree polls until lbctl rollout status -o json and the dashboard's
// document give every proxy the same state, victim's being want, and both
// the same converged verdict (false unless want is SYNCED).
func agree(t *testing.T, ctx context.Context, f *fleet.Fleet, when, want, victim string) {
	t.Helper()
	eventually(t, 20*time.Second, "lbctl and the dashboard agree "+when, func() error {
		out, code, err := f.Lbctl(ctx, "-o", "json", "rollout", "status")
		if err != nil {
			return err
		}
		var cli struct {
			Proxies []struct {
				ProxyCluster string `json:"proxy_cluster"`
				ID           string `json:"id"`
				State        string `json:"state"`
			} `json:"proxies"`
			Converged bool `json:"converged"`
		}
		if err := json.NewDecoder(strings.NewReader(out)).Decode(&cli); err != nil {
			return fmt.Errorf("lbctl rollout status (exit %d): %v\n%s", code, err, out)
		}
		resp, err := http.Get(f.SchedAPIs[0] + "/ui/api/state")
		if err != nil {
			return err
		}
		var doc struct {
			Rollout []struct {
				ProxyCluster string `json:"proxy_cluster"`
				Converged    bool   `json:"converged"`
				Proxies      []struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"proxies"`
			} `json:"rollout"`
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("dashboard state: %v", err)
		}
		lb, ui := map[string]string{}, map[string]string{}
		for _, p := range cli.Proxies {
			lb[p.ProxyCluster+"/"+p.ID] = p.State
		}
		uiConverged := true
		for _, r := range doc.Rollout {
			if len(r.Proxies) > 0 && !r.Converged {
				uiConverged = false
			}
			for _, p := range r.Proxies {
				ui[r.ProxyCluster+"/"+p.ID] = p.State
			}
		}
		if fmt.Sprint(lb) != fmt.Sprint(ui) {
			return fmt.Errorf("lbctl %v, dashboard %v", lb, ui)
		}
		if lb["BFE1/"+victim] != want {
			return fmt.Errorf("BFE1/%s is %s, want %s", victim, lb["BFE1/"+victim], want)
		}
		if cli.Converged != uiConverged || cli.Converged != (want == "SYNCED") || (code == 0) != cli.Converged {
			return fmt.Errorf("converged: lbctl %v (exit %d), dashboard %v", cli.Converged, code, uiConverged)
		}
		t.Logf("%s: lbctl and the dashboard agree: %v", when, lb)
		return nil
	})
}

// Scenario (issue 21, with issue 15 item 3): an input the scheduler cannot
// publish (every sub-cluster of demo-main drained under BFE1's pinned row:
// 100 % dropped without allow_full_drop) shows in the browser as BFE1
// BLOCKED with the validator's reason, in the rollout heading and as a mark
// on BFE1's matrix rows (the reason on hover), without a reload.
func TestDashboardShowsBlocked(t *testing.T) {
	exe := chromium(t)
	f, ctx := servingFleet(t)
	bctx := browser(t, ctx, exe)
	heading := `h3[data-rollout="BFE1"]`
	openDashboard(t, bctx, f.SchedAPIs[0]+"/ui/", heading)
	waitInPage(t, bctx, heading, "BFE1 converged before the drains", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "converged") && !strings.Contains(s, "BLOCKED")
	})
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument = 1`)); err != nil {
		t.Fatal(err)
	}
	if o, code, err := f.Lbctl(ctx, "drain", "--cluster", "demo-main", "--subcluster", "SC1", "--reason", "e2e drain all", "--wait"); err != nil || code != 0 {
		t.Fatalf("drain SC1 --wait: exit %d %v\n%s", code, err, o)
	}
	// lbctl refuses the last drain before writing (issue 15); written by
	// hand, as etcdctl would, it reaches the scheduler, which cannot
	// publish it.
	drainByHand(t, ctx, f, "demo-main", "SC2", "e2e drain all")
	const reason = "100 drops all traffic; set allow_full_drop to allow it"
	took := waitInPage(t, bctx, heading, "BFE1 BLOCKED with the validator's reason", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "BLOCKED") && strings.Contains(s, reason) && !strings.Contains(s, "converged")
	})
	t.Logf("drain SC2 → BFE1 BLOCKED in the page after %s", took.Round(10*time.Millisecond))
	mark := `tr[data-row="demo-main/BFE1"] span[data-blocked="BFE1"]`
	waitInPage(t, bctx, mark, "BFE1's matrix row marked BLOCKED", 5*time.Second, func(s string) bool { return s == "BLOCKED" })
	if title, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(mark), "title")); err != nil || !strings.Contains(title.Value, reason) {
		t.Errorf("BFE1's BLOCKED mark title %q (%v): want the validator's reason", title.Value, err)
	}
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument || 0`)); err != nil || same != 1 {
		t.Fatalf("the page reloaded (mark %d, %v)", same, err)
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(artefactDir(t), "dashboard-blocked-1280.png"), png, 0o644)
	}
	if err != nil {
		t.Errorf("screenshot: %v", err)
	}
}

// realisedNear reads the dashboard's document and checks the newest
// realised share of pc → cluster against want, within tol points, over at
// least 500 answers.
func realisedNear(t *testing.T, f *fleet.Fleet, pc, cluster string, want map[string]float64, tol float64) error {
	resp, err := http.Get(f.SchedAPIs[0] + "/ui/api/state")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var doc struct {
		Traffic []struct {
			ProxyCluster string `json:"proxy_cluster"`
			Cluster      string `json:"cluster"`
			Points       []struct {
				Answers  uint64             `json:"answers"`
				Realised map[string]float64 `json:"realised"`
			} `json:"points"`
		} `json:"traffic"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return err
	}
	for _, s := range doc.Traffic {
		if s.ProxyCluster != pc || s.Cluster != cluster || len(s.Points) == 0 {
			continue
		}
		p := s.Points[len(s.Points)-1]
		if p.Answers < 500 {
			return fmt.Errorf("newest point: realised share over %d answers, want at least 500", p.Answers)
		}
		for sub, w := range want {
			if d := p.Realised[sub] - w; d > tol || d < -tol {
				return fmt.Errorf("%s realised %.1f%%, intended %.0f%% (tolerance %.0f points; all %v)", sub, p.Realised[sub], w, tol, p.Realised)
			}
		}
		t.Logf("%s → %s realised over %d answers: %v", pc, cluster, p.Answers, p.Realised)
		return nil
	}
	return fmt.Errorf("no traffic series for %s → %s", pc, cluster)
}

// Scenario (issue 21, health): the proxies' view of each instance reaches
// the page from their demand reports. Every proxy sees a demo-main SC1
// instance healthy; an admin override on one BFE1 proxy drains it there,
// and the page says DRAINED by 1 of them and, on hover, which proxy; clearing
// the override brings it back to healthy — without a reload.
func TestDashboardProxiesView(t *testing.T) {
	exe := chromium(t)
	f, ctx := servingFleet(t)
	bctx := browser(t, ctx, exe)
	victim := f.BackendsOf("demo-main", "SC1")[0]
	proxy := f.ProxiesOf("BFE1")[0]
	sel := fmt.Sprintf(`div[data-instance="demo-main/SC1/%s"] span[data-proxies]`, victim.Addr)
	openDashboard(t, bctx, f.SchedAPIs[0]+"/ui/", sel)
	n := len(f.Proxies)
	healthy := fmt.Sprintf("proxies: healthy (%d/%d)", n, n)
	waitInPage(t, bctx, sel, victim.Addr+" healthy for all "+fmt.Sprint(n)+" proxies", 20*time.Second, func(s string) bool { return strings.HasPrefix(s, healthy) })
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument = 1`)); err != nil {
		t.Fatal(err)
	}

	override := func(method, url, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d", method, url, resp.StatusCode)
		}
	}
	override("POST", proxy.AdminURL+"/v1/overrides", `{"addr":"`+victim.Addr+`","drain":true,"ttl":"5m"}`)
	want := fmt.Sprintf("proxies: DRAINED by 1/%d", n)
	took := waitInPage(t, bctx, sel, victim.Addr+" drained by one proxy", 20*time.Second, func(s string) bool { return strings.HasPrefix(s, want) })
	t.Logf("override on %s → page shows it in %s (reports every 2 s)", proxy.ID, took.Round(10*time.Millisecond))
	if title, err := chromedp.Run(bctx, chromedp.AttributeValue(chromedp.CSS(sel), "title")); err != nil || title.Value != "BFE1/"+proxy.ID+" drained by override" {
		t.Errorf("hover of %s: %q (%v), want the proxy that drains it", victim.Addr, title.Value, err)
	}
	override("DELETE", proxy.AdminURL+"/v1/overrides/"+victim.Addr, "")
	waitInPage(t, bctx, sel, victim.Addr+" healthy again", 20*time.Second, func(s string) bool { return strings.HasPrefix(s, healthy) })
	if same, err := chromedp.Run(bctx, chromedp.Evaluate[int](`window.__sameDocument || 0`)); err != nil || same != 1 {
		t.Fatalf("the page reloaded (mark %d, %v)", same, err)
	}
}
