package lbctl

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// The scheduler's dashboard refuses the writes lbctl refuses before
// writing, in the very words lbctl prints (both call scheduler/precheck),
// and writes nothing either.
func TestDashboardRefusesWhatLbctlRefuses(t *testing.T) {
	h := newHarness(t)
	h.applyDemo() // BFE1's demo-main row is pinned SC1=45 SC2=45 GSLB_BLACKHOLE=10
	s := h.startScheduler("tok")
	page := func(body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.APIAddr()+"/ui/api/action", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("X-Sluice-Dashboard", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out["error"]
	}

	h.mustRun("drain", "--cluster", "demo-main", "--subcluster", "SC1")
	for _, c := range []struct {
		lbctl          []string
		page, override string
	}{
		{[]string{"drain", "--cluster", "demo-main", "--subcluster", "SC2"}, `{"kind":"drain","cluster":"demo-main","subcluster":"SC2"}`,
			`To drop all that traffic on purpose, tick "allow a full drop" and send the drain again.`},
		{[]string{"weights", "set", "--cluster", "demo-main", "--proxy-cluster", "BFE2", "SC1=100"},
			`{"kind":"pin","cluster":"demo-main","proxy_cluster":"BFE2","weights":{"SC1":100}}`,
			`To drop all that traffic on purpose, tick "allow GSLB_BLACKHOLE=100" and send the pin again.`},
	} {
		_, rev := h.desired()
		out, errs, code := h.run("", c.lbctl...)
		if code != ExitError || out != "" || !strings.HasPrefix(errs, "lbctl: refused: the scheduler could not publish ") {
			t.Fatalf("lbctl %v: exit %d, stdout %q, stderr %q; want exit 1 and a refusal", c.lbctl, code, out, errs)
		}
		pcode, perr := page(c.page)
		// The same words but the last line, which names how to override
		// the refusal: lbctl's flag there, the page's own way here.
		want := strings.TrimSuffix(strings.TrimPrefix(errs, "lbctl: "), "\n")
		want = want[:strings.LastIndexByte(want, '\n')+1] + c.override
		if pcode != http.StatusBadRequest || perr != want {
			t.Errorf("%s: %d %q\nwant 400 and lbctl's words %q", c.page, pcode, perr, want)
		}
		if !strings.HasSuffix(errs, "\nTo drop all that traffic on purpose, run again with --allow-full-drop.\n") {
			t.Errorf("lbctl %v: %q does not end with its flag", c.lbctl, errs)
		}
		if _, now := h.desired(); now != rev {
			t.Errorf("%s: refused, yet the desired state moved from revision %d to %d", c.page, rev, now)
		}
	}
}
