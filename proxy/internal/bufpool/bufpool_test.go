package bufpool

import (
	"net/http/httputil"
	"testing"
)

var _ httputil.BufferPool = HTTPUtil{}

func TestBuffersAreFullSize(t *testing.T) {
	b := Get()
	if len(*b) != Size {
		t.Fatalf("Get: %d bytes, want %d", len(*b), Size)
	}
	Put(b)
	var h HTTPUtil
	c := h.Get()
	if len(c) != Size {
		t.Fatalf("HTTPUtil.Get: %d bytes, want %d", len(c), Size)
	}
	h.Put(c)
}
