//go:build unix

package forward

import "syscall"

// writeAll writes p to the non-blocking socket fd until it is all written,
// the socket buffer is full (n < len(p), nil error) or an error occurs.
func writeAll(fd uintptr, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k, err := syscall.Write(int(fd), p[n:])
		if k > 0 {
			n += k
		}
		switch err {
		case nil:
		case syscall.EINTR:
		case syscall.EAGAIN:
			return n, nil
		default:
			return n, err
		}
	}
	return n, nil
}
