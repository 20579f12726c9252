package config

import "time"

// Shift states. The operator writes pending, paused, running (resume) and
// aborted; the scheduler moves a shift to running and done.
const (
	ShiftPending = "pending"
	ShiftRunning = "running"
	ShiftPaused  = "paused"
	ShiftAborted = "aborted"
	ShiftDone    = "done"
)

// Shift is an operator's intent to move Percent points of a proxy cluster's
// traffic for one backend cluster from the sub-clusters in IDC From to those
// in IDC To, optionally ramped over Ramp in steps of StepPercent points.
// It is stored under its own key (api/keys Shift) so that pause, resume and
// abort are compare-and-swap edits of one small value.
type Shift struct {
	ID           string `json:"id"`
	ProxyCluster string `json:"proxy_cluster"`
	Cluster      string `json:"cluster"`
	From         string `json:"from"`
	To           string `json:"to"`
	// Percent is points of the row's denominator (as a percentage) to move,
	// 1..100; capped by what the From IDC has.
	Percent int `json:"percent"`
	// Ramp spreads the move over this long; 0 moves at once.
	Ramp Duration `json:"ramp,omitempty"`
	// StepPercent is the size of each ramp step in points. Default 10.
	StepPercent int       `json:"step_percent,omitempty"`
	State       string    `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Author      string    `json:"author,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// ShiftProgress is written by the scheduler under api/keys ShiftProgress.
type ShiftProgress struct {
	ID string `json:"id"`
	// AppliedPercent is how many points have been moved so far.
	AppliedPercent int `json:"applied_percent"`
	// TargetPercent is Percent capped by what the From IDC had.
	TargetPercent int    `json:"target_percent"`
	State         string `json:"state"`
	// Version is the snapshot version that carries AppliedPercent.
	Version   uint64    `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
	Message   string    `json:"message,omitempty"`
}
