//go:build !linux

package sockio

import (
	"net"
	"syscall"
)

// supported is false: Wrap leaves connections as they are, so no Conn (and
// none of the raw calls below) is ever used here.
const supported = false

func rawRead(fd uintptr, p []byte) (int, syscall.Errno)  { return 0, syscall.EINVAL }
func rawWrite(fd uintptr, p []byte) (int, syscall.Errno) { return 0, syscall.EINVAL }

func rawPeek(fd uintptr, b *byte) (int, syscall.Errno) { return 0, syscall.EINVAL }

// pollWaitOK is false: AwaitAfterDrain never waits here.
const pollWaitOK = false

func pollCtx(*net.TCPConn) uintptr              { return 0 }
func runtimePollWait(ctx uintptr, mode int) int { return 0 }
