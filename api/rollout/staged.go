package rollout

import (
	"fmt"
	"time"
)

// Staged rollout states (Staged.State).
const (
	// StageProgressing: the stage's proxies are applying the candidate
	// (apply gate).
	StageProgressing = "PROGRESSING"
	// StageBaking: every selected proxy runs the candidate; the traffic
	// gates watch it for the stage's bake time.
	StageBaking = "BAKING"
	// StageAwaitingPromotion: the gates passed and the policy's promotion
	// is manual: `lbctl rollout promote` starts the next stage.
	StageAwaitingPromotion = "AWAITING_PROMOTION"
	// StagePaused: an operator paused the rollout; nothing moves until
	// `lbctl rollout resume` (the stage restarts then).
	StagePaused = "PAUSED"
	// StageDone: the candidate is every proxy's stable snapshot.
	StageDone = "DONE"
	// StageRolledBack: a gate failed; the stage's proxies went back to the
	// stable content (RollbackVersion). The same inputs are not tried again
	// until they change or `lbctl rollout retry`.
	StageRolledBack = "ROLLED_BACK"
	// StageAborted: an operator aborted (or new inputs superseded the
	// candidate); like a rollback: the operator's abort holds the inputs
	// too.
	StageAborted = "ABORTED"
	// StageUrgent: the change skipped the stages (Staged.Reason says why).
	StageUrgent = "URGENT"
)

// Staged is a proxy cluster's staged rollout record
// (keys.Layout.Rollout): written by the scheduler leader, fenced, so that a
// new leader continues from the recorded stage.
type Staged struct {
	ID           string `json:"id"`
	ProxyCluster string `json:"proxy_cluster"`
	State        string `json:"state"`
	// Lineage of both snapshots; Stable* is what the proxies outside the
	// stage run, Candidate* what the stage's proxies run.
	Lineage          string `json:"lineage"`
	StableVersion    uint64 `json:"stable_version"`
	StableHash       string `json:"stable_hash"`
	CandidateVersion uint64 `json:"candidate_version"`
	CandidateHash    string `json:"candidate_hash"`
	// Stage is the current stage (from 0) of Stages.
	Stage  int `json:"stage"`
	Stages int `json:"stages"`
	// InputRevision is the input revision the candidate was computed from.
	InputRevision int64 `json:"input_revision,omitempty"`
	// Selected are the proxies of the stage at the last check.
	Selected []string `json:"selected,omitempty"`
	// Gates are the last evaluation of the stage's gates.
	Gates []Gate `json:"gates,omitempty"`
	// Reason: why it ended (the failed gate and its figures), was paused or
	// skipped the stages.
	Reason     string `json:"reason,omitempty"`
	FailedGate string `json:"failed_gate,omitempty"`
	// RollbackVersion is the version that republished the stable content.
	RollbackVersion uint64 `json:"rollback_version,omitempty"`
	// Baseline: the stable proxies' figures the last time they had enough
	// answers; a stage without stable proxies to compare with (the last,
	// 100 % one) is judged against them.
	Baseline *Baseline `json:"baseline,omitempty"`
	// Released: an ended rollout whose inputs may be tried again (lbctl
	// rollout retry, or it ended because the inputs changed).
	Released bool `json:"released,omitempty"`
	// PausedState is the state a pause interrupted.
	PausedState  string    `json:"paused_state,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	StageStarted time.Time `json:"stage_started"`
	BakeStarted  time.Time `json:"bake_started,omitzero"`
	EndedAt      time.Time `json:"ended_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Baseline is the stable proxies' 5xx ratio and p99 at a time.
type Baseline struct {
	Ratio5xx float64   `json:"ratio_5xx"`
	P99Ms    float64   `json:"p99_ms"`
	Answers  uint64    `json:"answers"`
	At       time.Time `json:"at"`
}

// Holds reports whether the rollout holds back inputs of content hash: it
// was rolled back or aborted by an operator, and not released since.
func (s Staged) Holds(hash string) bool {
	return (s.State == StageRolledBack || s.State == StageAborted) && !s.Released && s.CandidateHash == hash
}

// Active reports whether the rollout still moves (not ended).
func (s Staged) Active() bool {
	switch s.State {
	case StageProgressing, StageBaking, StageAwaitingPromotion, StagePaused:
		return true
	}
	return false
}

// StagedWaiting is why a proxy cluster with this staged rollout has not
// converged although each proxy may run its stage's target: the rollout
// still moves (a stage is under way, baking, paused or awaiting
// promotion). Empty once it ended. lbctl and the dashboard both use it.
func StagedWaiting(s Staged) string {
	if !s.Active() {
		return ""
	}
	return fmt.Sprintf("staged rollout %s at stage %d of %d (%s)", s.ID, s.Stage+1, s.Stages, s.State)
}

// Gate is one gate's verdict with its figures.
type Gate struct {
	// Name: "apply", "5xx", "p99", "share", "blackhole".
	Name string `json:"name"`
	// OK: passed (or not judged yet); Judged: there were enough answers.
	OK     bool `json:"ok"`
	Judged bool `json:"judged"`
	// Detail says what was measured against what, in words.
	Detail string `json:"detail"`
}

// Operator requests (RolloutOp.Op).
const (
	OpPromote = "promote"
	OpPause   = "pause"
	OpResume  = "resume"
	OpAbort   = "abort"
	OpRetry   = "retry"
)

// RolloutOp is an operator request (keys.Layout.RolloutOp), consumed and
// deleted by the leader.
type RolloutOp struct {
	Op string `json:"op"`
	// All (promote): skip the remaining stages, every proxy at once (the
	// rollout ends URGENT).
	All    bool      `json:"all,omitempty"`
	Author string    `json:"author,omitempty"`
	At     time.Time `json:"at"`
}
