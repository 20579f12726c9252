package filesource

import (
	"io/fs"
	"syscall"
)

// sysStamp is what the inode adds to a file's stamp: device, inode number
// (a file replaced by rename is another inode) and change time, which every
// write and every metadata change (chmod, touch -d, utimes) moves and no
// call can set back. ok is false when the platform does not say.
func sysStamp(fi fs.FileInfo) (dev, ino uint64, ctimeNs int64, ok bool) {
	st, isStat := fi.Sys().(*syscall.Stat_t)
	if !isStat {
		return 0, 0, 0, false
	}
	return uint64(st.Dev), st.Ino, st.Ctim.Nano(), true //nolint:unconvert // Dev's type differs between architectures
}
