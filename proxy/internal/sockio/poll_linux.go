//go:build linux

package sockio

import (
	"net"
	"reflect"
	"unsafe"
)

// runtimePollWait is internal/poll.runtime_pollWait, the runtime's wait for
// a poll descriptor's readiness (mode 'r' or 'w'), which consumes the
// readiness flag if set and does not clear it first; it answers 0 when
// ready, else an error code (closing, deadline passed).
//
//go:linkname runtimePollWait internal/poll.runtime_pollWait
func runtimePollWait(ctx uintptr, mode int) int

// The path to a TCPConn's poll descriptor, net.TCPConn.conn.fd (*netFD)
// .pfd (poll.FD) .pd (pollDesc) .runtimeCtx, as offsets found once by
// reflection; pollWaitOK is false (AwaitAfterDrain never waits) if the
// layout is not the one expected.
var (
	fdOff, ctxOff uintptr
	pollWaitOK    = findPollCtx()
)

func findPollCtx() bool {
	field := func(t reflect.Type, name string) (reflect.StructField, bool) {
		if t.Kind() != reflect.Struct {
			return reflect.StructField{}, false
		}
		f, ok := t.FieldByName(name)
		return f, ok && len(f.Index) == 1
	}
	conn, ok := field(reflect.TypeFor[net.TCPConn](), "conn")
	if !ok {
		return false
	}
	fd, ok := field(conn.Type, "fd")
	if !ok || fd.Type.Kind() != reflect.Pointer || fd.Type.Elem().Name() != "netFD" {
		return false
	}
	pfd, ok := field(fd.Type.Elem(), "pfd")
	if !ok || pfd.Type.Name() != "FD" || pfd.Type.PkgPath() != "internal/poll" {
		return false
	}
	pd, ok := field(pfd.Type, "pd")
	if !ok || pd.Type.Name() != "pollDesc" {
		return false
	}
	rc, ok := field(pd.Type, "runtimeCtx")
	if !ok || rc.Type.Kind() != reflect.Uintptr {
		return false
	}
	fdOff = conn.Offset + fd.Offset
	ctxOff = pfd.Offset + pd.Offset + rc.Offset
	return true
}

// pollCtx is c's poll descriptor (0 once closed). Read it only while
// holding a reference on the descriptor (inside RawConn.Control): the
// runtime reuses a closed one's.
func pollCtx(c *net.TCPConn) uintptr {
	nfd := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(c), fdOff))
	if nfd == nil {
		return 0
	}
	return *(*uintptr)(unsafe.Add(nfd, ctxOff))
}
