package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// A shift created from the page is the intent lbctl shift writes, checked
// against the stored desired state with lbctl's words; a refused one writes
// nothing.
func TestShiftCreateAction(t *testing.T) {
	_, cli := etcdtest.New(t)
	act := actionServer(t, cli, state())
	shifts := func() []config.Shift {
		t.Helper()
		r, err := cli.Get(context.Background(), layout.ShiftsPrefix(), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var out []config.Shift
		for _, kv := range r.Kvs {
			var sh config.Shift
			if err := json.Unmarshal(kv.Value, &sh); err != nil {
				t.Fatal(err)
			}
			out = append(out, sh)
		}
		return out
	}

	for _, c := range []struct{ body, want string }{
		{`{"kind":"shift","cluster":"c","proxy_cluster":"BFE1","from":"IDC1","to":"IDC1","percent":30}`,
			`--from and --to are both "IDC1": a shift moves traffic between two IDCs`},
		{`{"kind":"shift","cluster":"c","proxy_cluster":"BFE1","from":"IDC1","to":"IDC9","percent":30}`,
			`IDC "IDC9" does not exist`},
		{`{"kind":"shift","cluster":"c","proxy_cluster":"BFE9","from":"IDC1","to":"IDC2","percent":0}`,
			"--percent 0 is outside 1..100\n--proxy-cluster \"BFE9\" does not exist"},
		{`{"kind":"shift","cluster":"c","proxy_cluster":"BFE1","from":"IDC1","to":"IDC2","percent":30,"ramp":"-1m"}`,
			`--ramp "-1m": a ramp must be a positive duration like "5m" (leave it empty to move at once)`},
	} {
		code, out := act(c.body)
		// lbctl's words (edit.CheckShift): the shift's own rules name it.
		if code != http.StatusBadRequest || !strings.HasPrefix(out["error"], "invalid shift; nothing was written: ") || !strings.HasSuffix(out["error"], c.want) {
			t.Errorf("%s: %d %q, want 400 \"invalid shift; nothing was written: …%s\"", c.body, code, out["error"], c.want)
		}
	}
	if got := shifts(); len(got) != 0 {
		t.Fatalf("refused shifts wrote %+v", got)
	}

	code, out := act(`{"kind":"shift","cluster":"c","proxy_cluster":"BFE1","from":"IDC1","to":"IDC2","percent":30,"ramp":"5m","step":5,"reason":"idc1 maintenance"}`)
	got := shifts()
	if code != http.StatusOK || len(got) != 1 {
		t.Fatalf("create: %d %v, %d shifts", code, out, len(got))
	}
	sh := got[0]
	want := "Shift " + sh.ID + " created: 30 points of BFE1's c traffic from IDC1 to IDC2 over 5m0s in steps of 5 (revision "
	if !strings.HasPrefix(out["message"], want) {
		t.Errorf("message %q, want %q…", out["message"], want)
	}
	if !strings.HasPrefix(sh.ID, "shift-") || sh.State != config.ShiftPending || sh.Percent != 30 || sh.Ramp.D().Minutes() != 5 || sh.StepPercent != 5 ||
		sh.Reason != "idc1 maintenance" || !strings.HasPrefix(sh.Author, "dashboard@") || sh.CreatedAt.IsZero() {
		t.Errorf("shift intent %+v", sh)
	}
}

// postAction posts body to the dashboard's action endpoint at url with the
// test's token and the CSRF header, and returns the status and the answer.
// actionServer stores st as the desired state, serves a dashboard over it
// (token "tok") until the test ends, and returns the page's action call.
func actionServer(t *testing.T, cli *clientv3.Client, st *config.State) func(body string) (int, map[string]string) {
	t.Helper()
	b, _ := json.Marshal(st)
	if _, err := cli.Put(context.Background(), layout.Desired(), string(b)); err != nil {
		t.Fatal(err)
	}
	d := New(Options{Client: cli, Layout: layout, Inputs: (&fakeInputs{}).get, Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return func(body string) (int, map[string]string) { t.Helper(); return postAction(t, srv.URL, body) }
}

func postAction(t *testing.T, url, body string) (int, map[string]string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/ui/api/action", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set(CSRFHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}
