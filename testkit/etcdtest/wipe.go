package etcdtest

import (
	"fmt"
	"os"
	"strconv"
)

// Wipe stops the server, deletes its data and starts a fresh, empty store
// in the same directory on the same ports: what clients see when an etcd is
// wiped or replaced behind its address. The fresh store has the same cluster
// id and starts again from revision 1. Only plain (non-TLS) servers with
// default options are wiped this way.
func (s *Server) Wipe() error {
	cp, err := strconv.Atoi(s.cfg.ListenClientUrls[0].Port())
	if err != nil {
		return fmt.Errorf("wipe: client port: %w", err)
	}
	pp, err := strconv.Atoi(s.cfg.ListenPeerUrls[0].Port())
	if err != nil {
		return fmt.Errorf("wipe: peer port: %w", err)
	}
	s.Stop()
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("wipe %s: %w", s.Dir, err)
	}
	n, err := Start(Options{Dir: s.Dir, ClientPort: cp, PeerPort: pp})
	if err != nil {
		return fmt.Errorf("wipe: start a fresh store: %w", err)
	}
	*s = *n
	return nil
}
