package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written with an explicit unit ("2s", "500ms")
// in JSON and YAML. A bare number is rejected: "2" could mean seconds or
// milliseconds, and BFE's files mix both.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d the way it is written in config files.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string with a unit.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts only strings with a unit, such as "2s" or "500ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s must be a string with a unit, like \"2s\" or \"500ms\"", string(b))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: must be a number with a unit (ns, us, ms, s, m, h), like \"2s\"", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q must not be negative", s)
	}
	*d = Duration(v)
	return nil
}
