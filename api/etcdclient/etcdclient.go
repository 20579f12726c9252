// Package etcdclient builds the one etcd client every Sluice component uses
// (lbproxy, lbscheduler, lbagent, lbctl), so connection behaviour is decided
// once:
//
//   - Building a client never talks to etcd: a component starts whatever
//     etcd is doing and the client connects, authenticates and reconnects in
//     the background. Only its own bad configuration (a malformed endpoint,
//     an unreadable certificate file) is an error of New.
//   - Reconnect attempts are at most MaxReconnectBackoff apart (gRPC's
//     default grows to 120 s); keepalive pings detect a dead connection within
//     KeepAliveTime+KeepAliveTimeout.
//   - Password authentication is done here, not by the etcd client: a token
//     etcd rejects (etcd restarted, token expired, auth re-enabled) is dropped
//     and a new one is fetched before the call is retried once, and the
//     Authenticate call never carries the stale token (etcd before 3.4.28
//     rejects it).
//   - The etcd client's own zap log is silenced; its errors go to the slog
//     logger at warn.
//   - Every call's outcome feeds the connection state (Connected, State,
//     the sluice_etcd_* metrics) and Explain turns an error into a sentence
//     naming the endpoint and the cause.
package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"

	"github.com/sluicelb/sluice/api/tlsfiles"
)

// Connection tuning shared by every component.
const (
	// DefaultDialTimeout bounds one connection attempt.
	DefaultDialTimeout = 3 * time.Second
	// MaxReconnectBackoff is the longest wait between reconnect attempts.
	MaxReconnectBackoff = 2 * time.Second
	// KeepAliveTime and KeepAliveTimeout: a connection without an answer to
	// a ping for KeepAliveTime+KeepAliveTimeout is closed and redialled
	// (gRPC does not ping more often than every 10 s).
	KeepAliveTime    = 10 * time.Second
	KeepAliveTimeout = 2 * time.Second
)

// Config is what the common flags give (--etcd-endpoints, --etcd-user,
// --etcd-password, --etcd-cacert, --etcd-cert, --etcd-key, the dial timeout).
type Config struct {
	Endpoints []string
	// Username and Password authenticate (both or neither).
	Username, Password string
	// CACert, Cert and Key are PEM files (api/tlsfiles); TLS, when set, is
	// used instead of them.
	CACert, Cert, Key string
	TLS               *tls.Config
	// DialTimeout bounds one connection attempt (default DefaultDialTimeout).
	DialTimeout time.Duration
	// Logger receives, at warn, the first failure of every kind (said for
	// a person) and the etcd client's own errors, and "etcd usable again"
	// after a failure; nil logs nothing.
	Logger *slog.Logger
}

// Client is an etcd client with Sluice's connection handling. The embedded
// *clientv3.Client is used as is; Close closes it.
type Client struct {
	*clientv3.Client
	endpoints []string
	user      string
	auth      *auth
	health    *health
}

// New checks cfg and builds a client. It does not contact etcd.
func New(cfg Config) (*Client, error) {
	if err := CheckEndpoints(cfg.Endpoints); err != nil {
		return nil, err
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("etcd: a user and its password go together: give both or neither")
	}
	tc := cfg.TLS
	if tc == nil {
		var err error
		if tc, err = tlsfiles.Client(cfg.CACert, cfg.Cert, cfg.Key); err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	dt := cfg.DialTimeout
	if dt <= 0 {
		dt = DefaultDialTimeout
	}
	c := &Client{endpoints: hostPorts(cfg.Endpoints), user: cfg.Username}
	c.health = newHealth(cfg.Logger, func(err error, key string) error { return explain(err, nil, c.endpoints, c.user, key) })
	c.auth = newAuth(cfg.Username, cfg.Password, dt)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: cfg.Endpoints, TLS: tc, DialTimeout: dt,
		DialKeepAliveTime: KeepAliveTime, DialKeepAliveTimeout: KeepAliveTimeout,
		// No Username/Password here: the client would authenticate inside
		// New (failing without etcd) and resend stale tokens; auth does it.
		Logger: zapToSlog(cfg.Logger),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
					MaxDelay: MaxReconnectBackoff,
				},
				MinConnectTimeout: dt,
			}),
			// Chained: they run inside the client's retry interceptor, once
			// per attempt.
			grpc.WithChainUnaryInterceptor(c.unary),
			grpc.WithChainStreamInterceptor(c.stream),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	c.Client = cli
	c.auth.authenticate = func(ctx context.Context, user, password string) (string, error) {
		resp, err := cli.Auth.Authenticate(ctx, user, password)
		if err != nil {
			return "", err
		}
		return resp.Token, nil
	}
	return c, nil
}

// Connected reports whether the client can use etcd: the connection is
// ready and the last call was not refused for authentication.
func (c *Client) Connected() bool {
	conn := c.ActiveConnection()
	return conn != nil && conn.GetState() == connectivity.Ready && !c.health.authBroken()
}

// State is the connection state shown in status documents and /readyz.
type State struct {
	Connected bool `json:"connected"`
	// LastErrorClass, LastError and LastErrorAt describe the last failed
	// call; LastError is Explain's sentence ("etcd 127.0.0.1:2379:
	// authentication failed … for user sluice"). Empty when none failed.
	LastErrorClass Class     `json:"last_error_class,omitempty"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
}

// State returns the connection state.
func (c *Client) State() State {
	st := c.health.state()
	st.Connected = c.Connected()
	return st
}

// Explain turns err into an *Error naming the endpoint and the cause; key,
// when known, is the key the call was about (named on permission denied).
// It returns nil for nil and err itself for a cancelled context.
func (c *Client) Explain(err error, key string) error {
	return explain(err, c.health.cause(), c.endpoints, c.user, key)
}

// CheckEndpoints checks every endpoint is host:port or a
// http(s)/unix(s) URL, so a typo fails at once instead of after a timeout.
func CheckEndpoints(eps []string) error {
	if len(eps) == 0 {
		return errors.New("etcd: no endpoints given")
	}
	for _, ep := range eps {
		if err := checkEndpoint(ep); err != nil {
			return fmt.Errorf("etcd endpoint %q: %w", ep, err)
		}
	}
	return nil
}

func checkEndpoint(ep string) error {
	hp := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		switch u.Scheme {
		case "http", "https":
		case "unix", "unixs":
			return nil
		default:
			return fmt.Errorf("scheme %q: want http, https, unix or unixs", u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return fmt.Errorf("path %q: an endpoint has no path", u.Path)
		}
		hp = u.Host
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		why := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			why = ae.Err
		}
		return fmt.Errorf("want host:port or http(s)://host:port (%s)", why)
	}
	if host == "" {
		return errors.New("no host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1-65535", port)
	}
	return nil
}

// hostPorts strips schemes: "http://127.0.0.1:2379" → "127.0.0.1:2379".
func hostPorts(eps []string) []string {
	out := make([]string, len(eps))
	for i, ep := range eps {
		if _, rest, ok := strings.Cut(ep, "://"); ok {
			ep = strings.TrimSuffix(rest, "/")
		}
		out[i] = ep
	}
	return out
}
