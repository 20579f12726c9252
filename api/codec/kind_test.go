package codec_test

import (
	"testing"

	"github.com/sluicelb/sluice/api/codec"
)

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want codec.Kind
	}{
		{`{"meta":{"proxy_cluster":"BFE1"},"clusters":{}}`, codec.KindSnapshot},
		{`{"topology":{"idcs":["IDC1"]}}`, codec.KindState},
		{`{"meta":{},"topology":{}}`, codec.KindState}, // not a snapshot: state decoding names the stray field
		{`{}`, codec.KindState},
		{`[1]`, codec.KindState},
		{`not json`, codec.KindState},
	} {
		if got := codec.KindOf([]byte(c.doc)); got != c.want {
			t.Errorf("KindOf(%s) = %v, want %v", c.doc, got, c.want)
		}
	}
}
