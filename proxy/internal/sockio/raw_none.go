//go:build !unix

package sockio

import "syscall"

// supported is false: Wrap leaves connections as they are.
const supported = false

func rawRead(fd uintptr, p []byte) (int, syscall.Errno)  { return 0, syscall.EINVAL }
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }
