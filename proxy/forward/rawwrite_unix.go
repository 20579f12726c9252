//go:build unix

package forward

import "github.com/sluicelb/sluice/proxy/internal/sockio"

// writeAll writes p to the non-blocking socket fd until it is all written,
// the socket buffer is full (n < len(p), nil error) or an error occurs.
func writeAll(fd uintptr, p []byte) (int, error) {
	n, errno := sockio.WriteAll(fd, p)
	if errno != 0 {
		return n, errno
	}
	return n, nil
}
