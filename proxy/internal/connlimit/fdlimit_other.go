//go:build !unix

package connlimit

func fdLimit() (uint64, bool) { return 0, false }
