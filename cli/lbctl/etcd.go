package lbctl

import (
	"errors"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/etcdclient"
)

// maxDialTimeout bounds one connection attempt whatever --timeout says, so
// an unreachable etcd is reported within --timeout with its cause.
const maxDialTimeout = 3 * time.Second

// etcd connects lazily: commands that work offline never dial. The client
// logs nothing (its own log lines never reach the terminal); failures are
// said by explain.
func (e *env) etcd() (*clientv3.Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	var eps []string
	for _, ep := range strings.Split(e.c.String("endpoints"), ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) == 0 {
		return nil, usageErr("--endpoints is empty")
	}
	if err := etcdclient.CheckEndpoints(eps); err != nil {
		return nil, usageErr("--endpoints: %v", err)
	}
	c, err := etcdclient.New(etcdclient.Config{
		Endpoints: eps, Username: e.c.String("user"), Password: e.c.String("password"),
		CACert: e.c.String("cacert"), Cert: e.c.String("cert"), Key: e.c.String("key"),
		DialTimeout: min(maxDialTimeout, e.timeout),
	})
	if err != nil {
		if strings.HasPrefix(err.Error(), "etcd TLS: ") {
			return nil, usageErr("--cacert/--cert/--key: %v", strings.TrimPrefix(err.Error(), "etcd TLS: "))
		}
		return nil, usageErr("%v", err)
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
