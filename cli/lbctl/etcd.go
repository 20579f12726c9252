package lbctl

import (
	"context"
	"errors"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdclient"
)

// etcd connects lazily: commands that work offline never dial. The client
// logs nothing (its own log lines never reach the terminal); failures are
// said by explain, and an etcd that cannot be used at all within the dial
// timeout (3 s at most) is said at once.
func (e *env) etcd() (*clientv3.Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	cfg := etcdclient.FromFlags(e.c)
	eps := cfg.Endpoints
	if len(eps) == 0 {
		return nil, usageErr("--endpoints is empty")
	}
	if err := etcdclient.CheckEndpoints(eps); err != nil {
		return nil, usageErr("--endpoints: %v", err)
	}
	// --etcd-dial-timeout (3 s by default) bounds one connection attempt
	// whatever --timeout says, so an unreachable etcd is reported within
	// --timeout with its cause.
	cfg.DialTimeout = min(cfg.DialTimeout, e.timeout)
	c, err := etcdclient.New(cfg)
	if err != nil {
		if strings.HasPrefix(err.Error(), "etcd TLS: ") {
			return nil, usageErr("--cacert/--cert/--key: %v", strings.TrimPrefix(err.Error(), "etcd TLS: "))
		}
		return nil, usageErr("%v", err)
	}
	// One cheap read bounded by the dial timeout: an etcd that cannot be
	// used (refused, DNS, TLS, password) is said at once, not after
	// --timeout. A slow answer or a refused permission is left to the
	// command itself (within --timeout).
	ctx, cancel := context.WithTimeout(e.c.Context, cfg.DialTimeout)
	_, err = c.Get(ctx, e.layout.Desired(), clientv3.WithCountOnly())
	cancel()
	err = c.Explain(err, "") // a bare timeout gets the cause the attempts saw
	switch etcdclient.ClassOf(err) {
	case etcdclient.ClassUnreachable, etcdclient.ClassDNS, etcdclient.ClassTLS, etcdclient.ClassAuth:
		c.Close()
		return nil, err
	}
	e.etcdc, e.client = c, c.Client
	return e.client, nil
}

// explain rewords an etcd failure in err to name the endpoint and the cause
// ("read snapshot pointers: etcd 127.0.0.1:2379: unreachable (connection
// refused)"), keeping err's exit code.
func (e *env) explain(err error) error {
	if err == nil || e.etcdc == nil || etcdclient.ClassOf(err) == "" {
		return err
	}
	var coded *exitError
	if errors.As(err, &coded) {
		return withCode(coded.code, e.etcdc.Explain(coded.err, ""))
	}
	return e.etcdc.Explain(err, "")
}
