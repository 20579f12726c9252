package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

func TestShiftCheck(t *testing.T) {
	ok := config.Shift{ID: "s", ProxyCluster: "B", Cluster: "c", From: "IDC1", To: "IDC2", Percent: 30, StepPercent: 10,
		Ramp: config.Duration(time.Minute), State: config.ShiftPending}
	if err := ok.Check(); err != nil {
		t.Fatalf("valid shift refused: %v", err)
	}
	for _, c := range []struct {
		edit func(*config.Shift)
		want string
	}{
		{func(s *config.Shift) { s.Ramp = config.Duration(-5 * time.Second) }, "--ramp -5s is negative"},
		{func(s *config.Shift) { s.Percent = 5 }, "--step 10 is larger than --percent 5"},
		{func(s *config.Shift) { s.Percent = 0 }, "--percent 0 is outside 1..100"},
		{func(s *config.Shift) { s.Percent = 101 }, "--percent 101 is outside 1..100"},
		{func(s *config.Shift) { s.StepPercent = -1 }, "--step -1 is outside 1..100"},
		{func(s *config.Shift) { s.Ramp = config.Duration(time.Second) }, "is 333.333333ms per step, under the 1s minimum"},
		{func(s *config.Shift) { s.To = "IDC1" }, `--from and --to are both "IDC1"`},
		{func(s *config.Shift) { s.State = "bogus" }, `state "bogus" is not one of`},
	} {
		s := ok
		c.edit(&s)
		err := s.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "shift s: ") {
			t.Errorf("%+v: %v, want %q", s, err, c.want)
		}
	}
	// Without a ramp the step does not matter: the shift moves at once.
	s := ok
	s.Ramp, s.Percent = 0, 5
	if err := s.Check(); err != nil {
		t.Fatalf("unramped 5-point shift refused: %v", err)
	}
}
