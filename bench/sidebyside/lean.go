package main

// The lean parts of proxy/h1 judged apart (-only lean): the client server
// and the upstream transport, each beside net/http's in place of it, on
// the allow path and, for the server, the flood path (a denied request
// never reaches the transport). gateway-local-stdboth is gateway-local on
// both of net/http's, so that each part is also judged with the other
// one net/http's.
const tGatewayStdBoth = "gateway-local-stdboth"

// leanTargets are what -only lean runs.
var leanTargets = []string{tGatewayLocal, tGatewayStd, tGatewayStdSrv, tGatewayStdBoth, tGatewayDeny, tGatewayDenyStd}

// leanPairs are the lean part's target over the same with net/http's part
// in its place: the server with the lean and with net/http's transport, on
// the allow and the deny path; the transport on the lean and on
// net/http's server; both.
var leanPairs = [][2]string{
	{tGatewayLocal, tGatewayStdSrv}, {tGatewayStd, tGatewayStdBoth}, {tGatewayDeny, tGatewayDenyStd},
	{tGatewayLocal, tGatewayStd}, {tGatewayStdSrv, tGatewayStdBoth},
	{tGatewayLocal, tGatewayStdBoth},
}

func init() {
	specs = append(specs, spec{tGatewayStdBoth,
		"gateway-local with client_server: standard and upstream_transport: standard (net/http's server and transport)", (*lab).gatewayTarget})
	gatewayConfigs[tGatewayStdBoth] = gatewayConfig{Policy: pLocal, Transport: "standard", ClientServer: "standard"}
	informational = append(informational, [2]string{tGatewayStd, tGatewayStdBoth}, [2]string{tGatewayStdSrv, tGatewayStdBoth},
		[2]string{tGatewayLocal, tGatewayStdBoth})
}

// leanRatios are the RATIO lines of leanPairs by CPU a request (perf's
// task-clock of the gateway over its requests, medians of the rounds): 1
// minus one is what the lean part saves of a request's CPU.
func leanRatios(runs map[string][]sample) []ratio {
	f := func(r sample) float64 { return usec(r.CPU) / float64(max(r.Requests, 1)) }
	var out []ratio
	for _, p := range leanPairs {
		a, okA := median(runs, p[0], f)
		b, okB := median(runs, p[1], f)
		out = append(out, div("cpu-per-req "+p[0]+"/"+p[1], a, b, okA && okB))
	}
	return out
}
