//go:build unix && !linux

package sockio

import "syscall"

// supported is false: Wrap leaves connections as they are; WriteAll writes
// through syscall.Write.
const supported = false

func rawRead(fd uintptr, p []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }

func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return n, 0
}
