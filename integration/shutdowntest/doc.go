// Package shutdowntest checks that the daemons honour a stop (SIGTERM
// cancels their context) within a bound whatever etcd does: here etcd is
// blackholed (a fault proxy between the daemon and etcd accepts and drops
// every byte), the case where each shutdown step that calls etcd would
// otherwise wait for its own long deadline or the lease TTL.
package shutdowntest
