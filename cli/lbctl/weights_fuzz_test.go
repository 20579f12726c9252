package lbctl

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// FuzzParseWeights feeds `weights set` / plan-file rows (SUBCLUSTER=WEIGHT
// arguments, here separated by spaces) to parseWeights. Either it rejects
// them — no row at all (nothing is written), an error that names every bad
// argument — or every argument became one entry with a weight in
// 0..DefaultDenominator, and printing the row back as arguments parses to
// the same row (round trip).
func FuzzParseWeights(f *testing.F) {
	for _, s := range []string{
		"SC1=45 SC2=45 GSLB_BLACKHOLE=10", "SC1=100", "SC1=0 SC2=0", "SC1=45 SC1=55", "SC1=-1", "SC1=101",
		"SC1=4.5", "=10", "SC1", "SC1==1", "SC1=+10", "SC1=010", "SC1=99999999999999999999", "a=b=c", "",
		"\xff=1", "SC1= 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, " ")
		if line == "" {
			args = nil
		}
		row, err := parseWeights(args)
		if err != nil {
			if row != nil {
				t.Fatalf("parseWeights(%q) returned a row with error %v", args, err)
			}
			if len(args) > 0 && !strings.Contains(err.Error(), "nothing was written") {
				t.Fatalf("parseWeights(%q) error %q does not say nothing was written", args, err)
			}
			return
		}
		if len(row) != len(args) {
			t.Fatalf("parseWeights(%q) gave %d entries for %d arguments", args, len(row), len(args))
		}
		for _, a := range args {
			name, val, _ := strings.Cut(a, "=")
			w, ok := row[name]
			if n, err := strconv.Atoi(val); !ok || err != nil || n != w {
				t.Fatalf("argument %q became %q=%d (present %v)", a, name, w, ok)
			}
			if w < 0 || w > config.DefaultDenominator {
				t.Fatalf("argument %q: weight %d outside 0..%d accepted", a, w, config.DefaultDenominator)
			}
		}
		var back []string
		for _, k := range slices.Sorted(maps.Keys(row)) {
			back = append(back, fmt.Sprintf("%s=%d", k, row[k]))
		}
		row2, err := parseWeights(back)
		if err != nil {
			t.Fatalf("printed row %q does not parse: %v", back, err)
		}
		if !maps.Equal(row, row2) {
			t.Fatalf("round trip changed the row: %v → %v", row, row2)
		}
	})
}
