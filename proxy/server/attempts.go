package server

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicelb/sluice/proxy/internal/balance"
)

// attempter is one transport's single attempt: the fast HTTP/1.1 client
// (fastAttempter) or http.Transport under httputil.ReverseProxy
// (stdAttempter). The loop around it — next pick, tryAgain, keeping a
// retry-on status answer, the retry span — is attemptLoop, written once.
type attempter[R any] interface {
	// attempt sends the request to pick. On failure, keep reports that res
	// is the backend's own answer (a policy.retry.on_status status), to be
	// relayed if no further attempt follows.
	attempt(pick balance.Pick) (res R, keep bool, f *failure)
	// release drops a kept answer before the next attempt (it reports its
	// pick's Done).
	release(res R)
}

// attemptLoop runs the attempts of one request and returns the answer to
// relay, or the error to answer with when there is none.
func attemptLoop[R any, A attempter[R]](st *reqState, a A) (R, *genError) {
	var last *failure
	var held R
	kept := false
	for {
		pick, err := st.next(last)
		if err != nil {
			if kept {
				return held, nil // no further attempt: the backend's own answer
			}
			var zero R
			return zero, st.giveUp(err, last)
		}
		if kept {
			a.release(held)
			var zero R
			held, kept = zero, false
		}
		res, keep, f := a.attempt(pick)
		if f == nil {
			return res, nil
		}
		last = f
		if keep {
			held, kept = res, true
		}
		bodySent := st.stream != nil && st.stream.read.Load() > 0
		if !tryAgain(f, st.replayable, bodySent) {
			if kept {
				return held, nil
			}
			var zero R
			return zero, failError(f)
		}
		if st.recording {
			_, sp := st.s.tracer.Start(st.ctx, "sluice.retry", trace.WithAttributes(
				attribute.Int("sluice.attempt", pick.Attempt()+1),
				attribute.String("sluice.retry.after", failError(f).code),
				attribute.String("sluice.subcluster", pick.SubCluster()),
				attribute.String("sluice.instance", st.instance)))
			sp.End()
		}
	}
}
