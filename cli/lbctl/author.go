package lbctl

import (
	"os"
	"os/user"
)

// author is who writes, recorded with every pin, drain and shift (and from
// there in every snapshot version that includes it): the etcd user when
// auth is on (etcd vouches for it), else --author, else $USER@host.
func (e *env) author() string {
	if u := e.c.String("user"); u != "" {
		return u
	}
	if a := e.c.String("author"); a != "" {
		return a
	}
	return defaultAuthor()
}

// defaultAuthor is $USER@host.
func defaultAuthor() string {
	name := os.Getenv("USER")
	if name == "" {
		name = "unknown"
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
