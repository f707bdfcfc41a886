// Package proxy is the gateway's http.Handler: for each request it reads one
// policies.Snapshot, matches a route, identifies the client, asks the limiter,
// and either answers (404, 413, 431, 401, 429, 503, 500 as JSON) or forwards
// the request upstream through one shared httputil.ReverseProxy. Every
// rate-limit header and the 429 body are rendered from the limiter's Verdict.
//
// # How a request flows
//
// Handler.ServeHTTP reads as plan → decide → (idempotency claim) → forward:
//
//  1. plan (plan.go). planner.plan works out everything the gateway needs
//     before the limiter decides, step by step, and stops at the first step
//     that answers (an answer: 400, 404, 413, 431, 503, the quota report):
//     header size; the canonical request (canonical.go), which is what is
//     matched, keyed and forwarded; the route, the request fitted to it,
//     and its error format; key inputs and body size; who is asking
//     (identity.go); on an llm route the call (its endpoint, then cheap
//     before costly, cheap.go: a call its headers already condemn is
//     judged without its body, and a peek that takes nothing refuses what
//     no wait fixes; only then is the body read, its tokens counted and
//     its price found, llmcall.go, within a bounded number of slots); the
//     idempotency key (idempotent.go); and the checks, one per policy. The
//     helpers of the other steps follow planner.plan in plan.go, so that
//     the plan reads in one file. It may read the body; apart from that
//     peek it sends nothing anywhere. Explain renders the same plan, built
//     by the same function, so serving and explaining cannot drift.
//  2. decide (decide.go): the limiter is asked once, with Reserve when the
//     request holds something until it ends (an llm call's tokens,
//     in-flight slots), waiting for a turn under on_limit: delay and
//     leaving shadow policies unenforced. A refusal is answered there
//     (429, 503, 500; 401 for a key the request lacks, after the policies
//     that could judge it counted it).
//  3. the idempotency key is claimed (idempotent.go): a duplicate is
//     replayed or refused, and its reservation given back.
//  4. forward (forward.go) takes the plan and the decision: ReverseProxy's
//     Rewrite, Transport (the pool's, then the route's upstream protocol),
//     ModifyResponse and ErrorHandler read them from the outbound request's
//     context (requestState), and the route's deadline is kept there too.
//     The response gets its rate-limit headers (headers.go, and
//     anthropic.go for Anthropic's); an llm response's usage
//     is read as it passes (llmcall.go, teeBody in tee.go, or the SSE
//     watcher of package llm) and the reservation settled to it; an
//     idempotent response is kept for its duplicates.
//
// The report (report.go) follows the request throughout for the metrics,
// the access log and the trace (tracing.go).
package proxy
