package lbproxy

import (
	"fmt"
	"log/slog"

	"github.com/sluicelb/sluice/api/etcdclient"
)

// newEtcdClient builds the proxy's etcd client. It fails only on the
// proxy's own bad configuration (a malformed endpoint, an unreadable
// certificate file): it never waits for etcd, so a proxy whose etcd is
// down, refuses its password or fails TLS still starts from its disk cache.
func newEtcdClient(e Etcd, log *slog.Logger) (*etcdclient.Client, error) {
	c, err := etcdclient.New(etcdclient.Config{
		Endpoints: e.Endpoints, Username: e.Username, Password: e.Password,
		CACert: e.CACert, Cert: e.Cert, Key: e.Key, DialTimeout: e.DialTimeout, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("lbproxy: %w", err)
	}
	return c, nil
}
