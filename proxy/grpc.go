package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/policies"
)

// gRPC over HTTP/2 (github.com/grpc/grpc, doc/PROTOCOL-HTTP2.md): a call is
// a POST whose Content-Type is application/grpc, alone or followed by "+"
// (application/grpc+proto) or ";" parameters. Its status travels in the
// trailers, grpc-status and grpc-message, and an answer without a body puts
// them in the headers instead: a trailers-only response, which is what
// every answer the gateway gives a gRPC call itself is. HTTP's status stays
// 200 there: a gRPC client maps any other to a status of its own and
// loses the message (grpc-go's HTTP 429 becomes UNAVAILABLE).

// The gRPC status codes the gateway answers with (google.golang.org/grpc/codes).
const (
	grpcUnknown           = 2
	grpcInvalidArgument   = 3
	grpcDeadlineExceeded  = 4
	grpcPermissionDenied  = 7
	grpcResourceExhausted = 8
	grpcAborted           = 10
	grpcUnimplemented     = 12
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnauthenticated   = 16
)

// The gRPC response fields the gateway sets.
const (
	hdrGRPCStatus   = "Grpc-Status"
	hdrGRPCMessage  = "Grpc-Message"
	hdrGRPCPushback = "Grpc-Retry-Pushback-Ms"
	hdrGRPCTimeout  = "Grpc-Timeout"
)

// grpcStatusFor is the gRPC status of an answer of HTTP status: what the
// gateway's own refusals and failures mean to a gRPC client.
func grpcStatusFor(status int) int {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return grpcInvalidArgument
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented // no route: no such method here
	case http.StatusConflict:
		return grpcAborted
	case http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge, http.StatusTooManyRequests:
		return grpcResourceExhausted
	case http.StatusGatewayTimeout:
		return grpcDeadlineExceeded
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return grpcUnavailable
	case http.StatusInternalServerError:
		return grpcInternal
	}
	return grpcUnknown
}

// grpcLimitStatus is the gRPC status of a rate-limit refusal on route.
func grpcLimitStatus(route *policies.Route) int {
	if route != nil && route.GRPCLimitStatus == policies.GRPCUnavailable {
		return grpcUnavailable
	}
	return grpcResourceExhausted
}

// writeGRPC answers a gRPC call with code and msg, trailers-only: HTTP 200,
// the status in the headers, no body. Over HTTP/2 that is one HEADERS frame
// that ends the stream. Headers already set (the rate-limit fields, the
// retry pushback) reach the client as the call's metadata.
func writeGRPC(w http.ResponseWriter, code int, msg string) {
	hdr := w.Header()
	hdr["Content-Type"] = valGRPC
	hdr[hdrGRPCStatus] = []string{strconv.Itoa(code)}
	if msg != "" {
		hdr[hdrGRPCMessage] = []string{grpcPercentEncode(msg)}
	}
	delete(hdr, "Retry-After-Ms")
	w.WriteHeader(http.StatusOK)
}

// grpcPercentEncode encodes msg as grpc-message wants it: every byte
// outside printable ASCII, and "%", as %XX.
func grpcPercentEncode(msg string) string {
	const hex = "0123456789ABCDEF"
	plain := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < 0x20 || c > 0x7e || c == '%' {
			plain = false
			break
		}
	}
	if plain {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// maxGRPCTimeout bounds grpc-timeout's value: 8 digits at most of any unit,
// and, in hours, more than a Duration holds.
const maxGRPCTimeout = 1<<63 - 1

// parseGRPCTimeout reads a grpc-timeout value: at most 8 digits and a unit
// (H, M, S, m, u, n). ok is false for anything else.
func parseGRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	digits := v[:len(v)-1]
	if strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if n > maxGRPCTimeout/int64(unit) {
		return maxGRPCTimeout, true
	}
	return time.Duration(n) * unit, true
}
