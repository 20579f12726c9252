// Package etcdclienttest holds the tests of api/etcdclient against real
// etcd servers: the embedded one of testkit/etcdtest with auth and TLS, and
// Debian's etcd 3.4 binary when it is installed (CI installs it).
package etcdclienttest
