package connlimit

// The default total limit comes from the open-file limit (RLIMIT_NOFILE's
// soft value, which Go raises to the hard one at start-up on Linux). Like
// HAProxy's maxconn derived from ulimit-n, it counts two descriptors per
// client connection (a busy one holds an upstream connection too) after a
// reserve for everything else (etcd, the admin API, log and cache files,
// idle pooled upstream connections beyond that): (limit − reserve) / 2,
// the reserve being 256 descriptors or a quarter of the limit when that is
// less.

// DefaultMax is the default total limit for an open-file limit of fds.
func DefaultMax(fds uint64) int {
	reserve := min(uint64(256), fds/4)
	n := (fds - reserve) / 2
	if n > 1<<30 {
		n = 1 << 30
	}
	return max(int(n), 1)
}

// FDLimit is the process's open-file limit (RLIMIT_NOFILE, soft); ok is
// false where it cannot be read.
func FDLimit() (fds uint64, ok bool) { return fdLimit() }
