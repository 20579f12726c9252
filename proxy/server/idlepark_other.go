//go:build !unix

package server

import (
	"errors"
	"time"
)

const canPark = false

func waitReadable(*addrConn, time.Duration) error {
	return errors.New("server: parking idle connections needs Unix")
}
