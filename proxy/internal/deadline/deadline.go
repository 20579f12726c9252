// Package deadline decides when a connection deadline is worth moving.
//
// Go arms a connection deadline as a runtime timer: moving it costs a timer
// update, and a proxy that moves its deadlines at every request pays that
// several times per request. nginx instead arms its timers only when an
// operation has to wait. Skip keeps the cost down the other way: a deadline
// that would only move a little later is left where it is, so a deadline
// fires at most 1/16 of its remaining time early and never late.
package deadline

import "time"

// Skip reports whether moving a deadline from armed to want can be left
// undone: want is later than armed, and by less than 1/16 of the time armed
// still has to run. Clearing (zero want), arming (zero armed) and moving
// earlier are never skipped.
func Skip(armed, want time.Time) bool {
	if want.IsZero() || armed.IsZero() || !want.After(armed) {
		return want.Equal(armed)
	}
	return want.Sub(armed) < time.Until(armed)/16
}
