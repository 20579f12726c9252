//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/keys"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/poll"
)

// The compose fleet (deploy/compose/docker-compose.yml, project "sluice").
const (
	project    = "sluice"
	controlNet = project + "_mgmt" // the etcd (management) network
)

// Proxy is one lbproxy container with its ports published on 127.0.0.1.
type Proxy struct {
	Name, ID, ProxyCluster string
	URL, Admin             string
	ControlIP              string
	// StallTimeout is its SLUICE_WATCH_STALL_TIMEOUT in the compose file.
	StallTimeout time.Duration
}

// Backend is one demo backend container and its agent.
type Backend struct {
	Name, Agent, SubCluster string
	Addr                    string // registered ip:port
	Stats                   string // published /stats URL
}

var (
	proxies = []Proxy{
		{Name: "sluice-bfe1-p1", ID: "bfe1-p1", ProxyCluster: "BFE1", URL: "http://127.0.0.1:18081", Admin: "http://127.0.0.1:19081", ControlIP: "10.91.10.31", StallTimeout: 90 * time.Second},
		{Name: "sluice-bfe1-p2", ID: "bfe1-p2", ProxyCluster: "BFE1", URL: "http://127.0.0.1:18082", Admin: "http://127.0.0.1:19082", ControlIP: "10.91.10.32", StallTimeout: 4 * time.Second},
		{Name: "sluice-bfe2-p1", ID: "bfe2-p1", ProxyCluster: "BFE2", URL: "http://127.0.0.1:18083", Admin: "http://127.0.0.1:19083", ControlIP: "10.91.10.33", StallTimeout: 4 * time.Second},
		{Name: "sluice-bfe2-p2", ID: "bfe2-p2", ProxyCluster: "BFE2", URL: "http://127.0.0.1:18084", Admin: "http://127.0.0.1:19084", ControlIP: "10.91.10.34", StallTimeout: 4 * time.Second},
	}
	backends = []Backend{
		{Name: "sluice-backend-sc1-1", Agent: "sluice-agent-sc1-1", SubCluster: "SC1", Addr: "10.91.0.11:8080", Stats: "http://127.0.0.1:18091/stats"},
		{Name: "sluice-backend-sc1-2", Agent: "sluice-agent-sc1-2", SubCluster: "SC1", Addr: "10.91.0.12:8080", Stats: "http://127.0.0.1:18092/stats"},
		{Name: "sluice-backend-sc1-3", Agent: "sluice-agent-sc1-3", SubCluster: "SC1", Addr: "10.91.0.13:8080", Stats: "http://127.0.0.1:18093/stats"},
		{Name: "sluice-backend-sc2-1", Agent: "sluice-agent-sc2-1", SubCluster: "SC2", Addr: "10.91.0.21:8080", Stats: "http://127.0.0.1:18094/stats"},
		{Name: "sluice-backend-sc2-2", Agent: "sluice-agent-sc2-2", SubCluster: "SC2", Addr: "10.91.0.22:8080", Stats: "http://127.0.0.1:18095/stats"},
		{Name: "sluice-backend-sc2-3", Agent: "sluice-agent-sc2-3", SubCluster: "SC2", Addr: "10.91.0.23:8080", Stats: "http://127.0.0.1:18096/stats"},
	}
	etcdMembers   = []string{"sluice-etcd1", "sluice-etcd2", "sluice-etcd3"}
	etcdEndpoints = []string{"https://127.0.0.1:12379", "https://127.0.0.1:12380", "https://127.0.0.1:12381"}
	schedulers    = []string{"sluice-scheduler1", "sluice-scheduler2"}
)

// Env is the running fleet seen from the host.
type Env struct {
	Out        string // output directory of the whole suite
	AdminToken string
	Etcd       *clientv3.Client // root, through every member's published port
	Layout     keys.Layout
	http       *http.Client
}

func newEnv(t *testing.T) *Env {
	t.Helper()
	out := os.Getenv("SLUICE_CHAOS_OUT")
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	e := &Env{Out: out, Layout: keys.MustNew(""), http: &http.Client{Timeout: 3 * time.Second}}
	env, err := os.ReadFile(filepath.Join(composeDir(), ".env"))
	if err != nil {
		t.Fatalf("compose .env (run make deploy-up first): %v", err)
	}
	for _, l := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(l, "SLUICE_PROXY_ADMIN_TOKEN="); ok {
			e.AdminToken = strings.TrimSpace(v)
		}
	}
	if e.AdminToken == "" {
		t.Fatal("no SLUICE_PROXY_ADMIN_TOKEN in compose .env")
	}
	// root's certificate lives only in the certs-private volume; the exited
	// bootstrap container still has it mounted.
	certs := filepath.Join(out, "certs")
	_ = os.RemoveAll(certs)
	if _, err := docker("cp", "sluice-bootstrap:/certs-private", certs); err != nil {
		t.Fatalf("copy root certificate: %v", err)
	}
	tlsCfg, err := rootTLS(certs)
	if err != nil {
		t.Fatal(err)
	}
	e.Etcd, err = clientv3.New(clientv3.Config{Endpoints: etcdEndpoints, TLS: tlsCfg, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		// Detect a frozen (docker pause) member quickly.
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Etcd.Close()
		e.http.CloseIdleConnections()
	})
	return e
}

func composeDir() string {
	if d := os.Getenv("SLUICE_COMPOSE_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "deploy", "compose")
}

func rootTLS(dir string) (*tls.Config, error) { return userTLS(dir, "root") }

// userTLS is the TLS config of one etcd user (certificate CN = user name);
// user "" presents no client certificate.
func userTLS(dir, user string) (*tls.Config, error) {
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("ca.pem: no certificate")
	}
	cfg := &tls.Config{RootCAs: pool}
	if user == "" {
		return cfg, nil
	}
	kp, err := tls.LoadX509KeyPair(filepath.Join(dir, user+".pem"), filepath.Join(dir, user+"-key.pem"))
	if err != nil {
		return nil, err
	}
	cfg.Certificates = []tls.Certificate{kp}
	return cfg, nil
}

// docker runs the docker CLI and returns its trimmed output.
func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func mustDocker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := docker(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventually polls cond until it returns nil or the deadline passes.
// Each check costs requests to the containers: every 200ms. It returns how
// long cond took to hold.
func eventually(t *testing.T, what string, limit time.Duration, cond func() error) time.Duration {
	t.Helper()
	return poll.Every(t, limit, 200*time.Millisecond, what, cond)
}

// healthy reports whether every named container is running and, when it
// has a health check, healthy.
func healthy(names ...string) error {
	for _, n := range names {
		s, err := docker("inspect", "--format", "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}healthy{{end}}", n)
		if err != nil {
			return err
		}
		if s != "running healthy" {
			return fmt.Errorf("%s is %s", n, s)
		}
	}
	return nil
}

// ProxyStatus is the part of lbproxy's GET /v1/status the suite reads.
type ProxyStatus struct {
	AppliedVersion uint64 `json:"applied_version"`
	Source         string `json:"source"`
	EtcdConnected  *bool  `json:"etcd_connected"`
	LatestVersion  uint64 `json:"latest_version"`
	// Etcd is the proxy's etcd connection state (api/etcdclient State).
	Etcd *struct {
		Connected      bool   `json:"connected"`
		LastErrorClass string `json:"last_error_class"`
		LastError      string `json:"last_error"`
	} `json:"etcd"`
}

func (e *Env) proxyStatus(ctx context.Context, p Proxy) (ProxyStatus, error) {
	var st ProxyStatus
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Admin+"/v1/status", nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	resp, err := e.http.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s /v1/status: %s", p.ID, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// admin GETs an admin endpoint of a proxy and returns the body.
func (e *Env) admin(p Proxy, path string) (string, error) {
	req, _ := http.NewRequest(http.MethodGet, p.Admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.AdminToken)
	resp, err := e.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s %s: %s", p.ID, path, resp.Status)
	}
	return string(b), err
}

// current returns the live snapshot version of a proxy cluster.
func (e *Env) current(ctx context.Context, pc string) (uint64, error) {
	k, _ := e.Layout.Current(pc)
	r, err := e.Etcd.Get(ctx, k)
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, fmt.Errorf("no snapshot for %s", pc)
	}
	var p snapshot.Pointer
	return p.Version, json.Unmarshal(r.Kvs[0].Value, &p)
}

// converged checks I4: every proxy has applied its cluster's current version
// (and the status key in etcd says so).
func (e *Env) converged(ctx context.Context) error {
	for _, p := range proxies {
		cur, err := e.current(ctx, p.ProxyCluster)
		if err != nil {
			return err
		}
		st, err := e.proxyStatus(ctx, p)
		if err != nil {
			return err
		}
		if st.AppliedVersion != cur {
			return fmt.Errorf("%s applied v%d, current is v%d", p.ID, st.AppliedVersion, cur)
		}
		k, _ := e.Layout.Status(p.ProxyCluster, p.ID)
		r, err := e.Etcd.Get(ctx, k)
		if err != nil {
			return err
		}
		if len(r.Kvs) == 0 {
			return fmt.Errorf("%s: no status key", p.ID)
		}
		var rs report.ProxyStatus
		if err := json.Unmarshal(r.Kvs[0].Value, &rs); err != nil {
			return err
		}
		if rs.AppliedVersion != cur {
			return fmt.Errorf("%s status key says v%d, current is v%d", p.ID, rs.AppliedVersion, cur)
		}
	}
	return nil
}

// waitConverged waits for I4 and returns how long it took.
func (e *Env) waitConverged(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	return eventually(t, "I4 convergence", limit, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return e.converged(ctx)
	})
}

// setRow rewrites BFE1's pin for demo-main (CAS on the desired state).
// Each attempt has its own short deadline, so a frozen member that holds
// one request does not stall the scenario.
func (e *Env) setRow(ctx context.Context, sc1, sc2, bh int, reason string) error {
	var last error
	for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
		ok, err := e.trySetRow(ctx, sc1, sc2, bh, reason)
		if ok {
			return nil
		}
		last = err
	}
	if last == nil {
		last = ctx.Err()
	}
	return fmt.Errorf("set BFE1 row: %w", last)
}

func (e *Env) trySetRow(ctx context.Context, sc1, sc2, bh int, reason string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, rev, err := e.desired(ctx)
	if err != nil {
		return false, err
	}
	w := map[string]int{"SC1": sc1, "SC2": sc2, "GSLB_BLACKHOLE": bh}
	i := bfe1Pin(st)
	if i < 0 {
		st.Pins = append(st.Pins, config.Pin{ProxyCluster: "BFE1", Cluster: "demo-main"})
		i = len(st.Pins) - 1
	}
	st.Pins[i].Weights, st.Pins[i].Reason = w, reason
	raw, err := json.Marshal(&st)
	if err != nil {
		return false, err
	}
	tr, err := e.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(e.Layout.Desired()), "=", rev)).
		Then(clientv3.OpPut(e.Layout.Desired(), string(raw))).Commit()
	if err != nil {
		return false, err
	}
	if !tr.Succeeded {
		return false, errors.New("desired state changed meanwhile (CAS)")
	}
	return true, nil
}

// desired reads the desired state and its mod revision.
func (e *Env) desired(ctx context.Context) (config.State, int64, error) {
	var st config.State
	r, err := e.Etcd.Get(ctx, e.Layout.Desired())
	if err != nil {
		return st, 0, err
	}
	if len(r.Kvs) == 0 {
		return st, 0, errors.New("no desired state")
	}
	if err := json.Unmarshal(r.Kvs[0].Value, &st); err != nil {
		return st, 0, err
	}
	return st, r.Kvs[0].ModRevision, nil
}

// bfe1Pin is the index of BFE1's pin for demo-main in st (-1: none).
func bfe1Pin(st config.State) int {
	return slices.IndexFunc(st.Pins, func(p config.Pin) bool { return p.ProxyCluster == "BFE1" && p.Cluster == "demo-main" })
}

// pinned reads BFE1's pinned weights for demo-main (nil: no pin).
func (e *Env) pinned(ctx context.Context) (map[string]int, error) {
	st, _, err := e.desired(ctx)
	if err != nil {
		return nil, err
	}
	if i := bfe1Pin(st); i >= 0 {
		return st.Pins[i].Weights, nil
	}
	return nil, nil
}

// etcdLeader returns the container name of the etcd leader.
func (e *Env) etcdLeader(ctx context.Context) (string, error) {
	for i, ep := range etcdEndpoints {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := e.Etcd.Status(c, ep)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader == 0 {
			return "", fmt.Errorf("%s sees no leader", etcdMembers[i])
		}
		if st.Header.MemberId == st.Leader {
			return etcdMembers[i], nil
		}
	}
	return "", errors.New("no member reports itself leader")
}

// schedulerLeader returns the container name of the scheduler leader.
func (e *Env) schedulerLeader(ctx context.Context) (string, error) {
	r, err := e.Etcd.Get(ctx, e.Layout.Leader())
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", errors.New("no scheduler leader")
	}
	var l report.Leader
	if err := json.Unmarshal(r.Kvs[0].Value, &l); err != nil {
		return "", err
	}
	return "sluice-" + l.ID, nil
}

// snapshotAuthors lists every stored snapshot of pc created after rev:
// version -> author.
func (e *Env) snapshotAuthors(ctx context.Context, pc string, afterRev int64) (map[uint64]string, error) {
	k, _ := e.Layout.SnapshotPrefix(pc)
	r, err := e.Etcd.Get(ctx, k, clientv3.WithPrefix(), clientv3.WithMinCreateRev(afterRev+1))
	if err != nil {
		return nil, err
	}
	out := map[uint64]string{}
	for _, kv := range r.Kvs {
		var m snapshot.Manifest
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", kv.Key, err)
		}
		// Authors are "lbscheduler/<id>"; keep the id.
		a := m.Meta.Author
		if i := strings.LastIndexByte(a, '/'); i >= 0 {
			a = a[i+1:]
		}
		out[m.Meta.Version] = a
	}
	return out, nil
}
