package logcheck

import (
	"strings"
	"testing"
)

func TestDuplicateKeys(t *testing.T) {
	log := `{"msg":"a","id":"p1","x":{"id":1}}
{"msg":"b","id":"p1","id":"p1"}
not json
`
	got := DuplicateKeys(log)
	if len(got) != 2 || !strings.HasPrefix(got[0], `key "id" twice`) || !strings.HasPrefix(got[1], "not a JSON object") {
		t.Fatalf("%q", got)
	}
}
