package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// testService is a real gRPC server's TestService: it echoes, streams as
// asked, answers the status a request names, and sends metadata both ways.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-upstream-header", "h", "x-saw-tenant", strings.Join(md.Get("x-tenant"), ",")))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-upstream-trailer", "t"))
	if s := req.GetResponseStatus(); s != nil && s.Code != 0 {
		return nil, status.Error(codes.Code(s.Code), s.Message)
	}
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (testService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for _, p := range req.GetResponseParameters() {
		time.Sleep(time.Duration(p.GetIntervalUs()) * time.Microsecond)
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: make([]byte, p.GetSize())}}); err != nil {
			return err
		}
	}
	stream.SetTrailer(metadata.Pairs("x-upstream-trailer", "streamed"))
	return nil
}

func (testService) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	total := 0
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		total += len(req.GetPayload().GetBody())
	}
}

func (testService) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// startGRPCUpstream serves testService on loopback, without TLS.
func startGRPCUpstream(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, testService{})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// grpcGateway starts a gateway with h2c on, in front of a gRPC upstream, with
// the routes and policies of extra; it returns a client connection to it.
func grpcGateway(t *testing.T, routes, policies string, extra ...string) (testpb.TestServiceClient, string) {
	t.Helper()
	up := startGRPCUpstream(t)
	yaml := fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  protocols: [http1, h2, h2c]
admin: {listen: ""}
`+strings.Join(extra, "")+`routes:
%s
policies:
%s
`, strings.ReplaceAll(routes, "UPSTREAM", "http://"+up), policies)
	g := startGateway(t, "grpc", writeConfig(t, "gateway.yaml", yaml))
	conn, err := grpc.NewClient(strings.TrimPrefix(g.base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn), g.base
}

func TestGRPCPassesThrough(t *testing.T) {
	// A short route timeout and body limit, which no call here is held to.
	c, _ := grpcGateway(t, `  - name: unary
    match: {path: /grpc.testing.TestService/UnaryCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [per-tenant]
  - name: streams
    match: {path_prefix: /grpc.testing.TestService}
    upstream: UPSTREAM
    upstream_protocol: h2c
    timeout: 100ms
    max_body_bytes: 1024`, `  per-tenant: {key: "header:x-tenant", rate: 1000, per: 1s}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("unary with metadata and trailers", func(t *testing.T) {
		var header, trailer metadata.MD
		out := metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme")
		resp, err := c.UnaryCall(out, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hello")}}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.GetPayload().GetBody()) != "hello" {
			t.Errorf("payload: got %q, want hello", resp.GetPayload().GetBody())
		}
		if got := header.Get("x-saw-tenant"); len(got) != 1 || got[0] != "acme" {
			t.Errorf("the upstream saw x-tenant %v, want acme", got)
		}
		if got := header.Get("x-upstream-header"); len(got) != 1 || got[0] != "h" {
			t.Errorf("header metadata: got %v, want h", got)
		}
		if got := trailer.Get("x-upstream-trailer"); len(got) != 1 || got[0] != "t" {
			t.Errorf("trailer metadata: got %v, want t", got)
		}
		if got := header.Get("x-ratelimit-limit"); len(got) != 1 || got[0] != "1000" {
			t.Errorf("x-ratelimit-limit: got %v, want 1000", got)
		}
	})

	t.Run("upstream status unchanged", func(t *testing.T) {
		msg := "no such thing: 100% gone, ünïcode"
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound), Message: msg}})
		if s := status.Convert(err); s.Code() != codes.NotFound || s.Message() != msg {
			t.Errorf("got %v %q, want NotFound %q", s.Code(), s.Message(), msg)
		}
	})

	t.Run("server streaming past the route timeout", func(t *testing.T) {
		var params []*testpb.ResponseParameters
		for range 5 {
			params = append(params, &testpb.ResponseParameters{Size: 512, IntervalUs: 60_000}) // 300 ms in all
		}
		stream, err := c.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{ResponseParameters: params})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("after %d messages: %v", n, err)
			}
			if len(resp.GetPayload().GetBody()) != 512 {
				t.Fatalf("message %d: %d bytes, want 512", n, len(resp.GetPayload().GetBody()))
			}
			n++
		}
		if n != 5 {
			t.Errorf("messages: got %d, want 5", n)
		}
		if got := stream.Trailer().Get("x-upstream-trailer"); len(got) != 1 || got[0] != "streamed" {
			t.Errorf("trailer: got %v, want streamed", got)
		}
	})

	t.Run("client streaming past the body limit and timeout", func(t *testing.T) {
		stream, err := c.StreamingInputCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 8 { // 8 KiB over 160 ms: past max_body_bytes and timeout
			if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: make([]byte, 1024)}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		resp, err := stream.CloseAndRecv()
		if err != nil || resp.GetAggregatedPayloadSize() != 8*1024 {
			t.Fatalf("got %v (%v), want 8192 bytes counted", resp.GetAggregatedPayloadSize(), err)
		}
	})

	t.Run("bidirectional", func(t *testing.T) {
		stream, err := c.FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			body := []byte(strconv.Itoa(i))
			if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv() // each answer arrives before the next is sent: nothing is buffered
			if err != nil || string(resp.GetPayload().GetBody()) != string(body) {
				t.Fatalf("message %d: got %q (%v)", i, resp.GetPayload().GetBody(), err)
			}
		}
		stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("end: got %v, want EOF", err)
		}
	})
}

// pushback is the grpc-retry-pushback-ms of md, or -2 when absent.
func pushback(md metadata.MD) int {
	v := md.Get("grpc-retry-pushback-ms")
	if len(v) != 1 {
		return -2
	}
	n, _ := strconv.Atoi(v[0])
	return n
}

func TestGRPCRefusals(t *testing.T) {
	c, base := grpcGateway(t, `  - name: unary
    match: {path: /grpc.testing.TestService/UnaryCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [per-tenant]
  - name: duplex
    match: {path: /grpc.testing.TestService/FullDuplexCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    grpc_limit_status: unavailable
    policies: [per-tenant]
  - name: closed
    match: {path: /grpc.testing.TestService/StreamingInputCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [none]`, `  per-tenant: {key: "header:x-tenant", rate: 3, per: 1m}
  none: {key: ip, rate: 0}`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tenant := func(name string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-tenant", name) }

	t.Run("rate limit: RESOURCE_EXHAUSTED with the policy, the wait and the headers", func(t *testing.T) {
		for i := range 3 {
			if _, err := c.UnaryCall(tenant("a"), &testpb.SimpleRequest{}); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		var header, trailer metadata.MD
		_, err := c.UnaryCall(tenant("a"), &testpb.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		s := status.Convert(err)
		if s.Code() != codes.ResourceExhausted || !strings.Contains(s.Message(), `policy "per-tenant"`) || !strings.Contains(s.Message(), "retry in") {
			t.Fatalf("got %v %q, want ResourceExhausted naming the policy and the wait", s.Code(), s.Message())
		}
		// Trailers-only: the metadata arrive as the trailers.
		md := metadata.Join(header, trailer)
		if ms := pushback(md); ms <= 0 || ms > 60_000 {
			t.Errorf("grpc-retry-pushback-ms: got %d, want the wait (0, 1m]", ms)
		}
		if got := md.Get("x-ratelimit-remaining"); len(got) != 1 || got[0] != "0" {
			t.Errorf("x-ratelimit-remaining: got %v, want 0", got)
		}
		if got := md.Get("ratelimit-policy"); len(got) != 1 || !strings.Contains(got[0], "per-tenant") {
			t.Errorf("ratelimit-policy: got %v", got)
		}
	})

	t.Run("a streaming call is one call, limited per call; unavailable on request", func(t *testing.T) {
		for i := range 3 {
			stream, err := c.FullDuplexCall(tenant("b"))
			if err != nil {
				t.Fatal(err)
			}
			for range 10 { // ten messages on one call take one from the limit
				if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("x")}}); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if _, err := stream.Recv(); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			stream.CloseSend()
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("call %d: end %v", i, err)
			}
		}
		stream, err := c.FullDuplexCall(tenant("b"))
		if err == nil {
			_, err = stream.Recv()
		}
		if s := status.Convert(err); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "per-tenant") {
			t.Fatalf("fourth call: got %v %q, want Unavailable (grpc_limit_status) naming the policy", s.Code(), s.Message())
		}
	})

	t.Run("a refusal no wait fixes: pushback -1", func(t *testing.T) {
		stream, err := c.StreamingInputCall(ctx)
		var trailer metadata.MD
		if err == nil {
			_, err = stream.CloseAndRecv()
			trailer = stream.Trailer()
		}
		if s := status.Convert(err); s.Code() != codes.ResourceExhausted {
			t.Fatalf("got %v %q, want ResourceExhausted", s.Code(), s.Message())
		}
		if ms := pushback(trailer); ms >= 0 {
			t.Errorf("grpc-retry-pushback-ms: got %d, want negative: no retry", ms)
		}
	})

	t.Run("no route: UNIMPLEMENTED", func(t *testing.T) {
		_, err := c.EmptyCall(ctx, &testpb.Empty{})
		if s := status.Convert(err); s.Code() != codes.Unimplemented || !strings.Contains(s.Message(), "no route") {
			t.Fatalf("got %v %q, want Unimplemented", s.Code(), s.Message())
		}
	})

	t.Run("malformed grpc-timeout: INVALID_ARGUMENT", func(t *testing.T) {
		// grpc-go writes grpc-timeout itself; a raw one comes from elsewhere.
		req, _ := http.NewRequest(http.MethodPost, base+"/grpc.testing.TestService/UnaryCall", strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Grpc-Timeout", "1x")
		resp, err := h2cClient(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "3" || len(body) != 0 {
			t.Fatalf("got HTTP %d, grpc-status %q, %d body bytes; want 200, 3 and none", resp.StatusCode, resp.Header.Get("Grpc-Status"), len(body))
		}
	})
}

// TestGRPCLimitHoldsUnder64Callers calls one limited method from 64
// goroutines for a second: what got through stays within rate × elapsed +
// burst, and every other call is RESOURCE_EXHAUSTED.
func TestGRPCLimitHoldsUnder64Callers(t *testing.T) {
	const rate, burst = 50, 20
	c, _ := grpcGateway(t, `  - name: unary
    match: {path: /grpc.testing.TestService/UnaryCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [per-tenant]`, fmt.Sprintf(`  per-tenant: {key: "header:x-tenant", rate: %d, per: 1s, burst: %d}`, rate, burst))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant", "acme")
	var ok, refused, other atomic.Int64
	var firstOther atomic.Value
	start := time.Now()
	stop := start.Add(time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
				switch status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					refused.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := int64(rate*elapsed.Seconds()) + burst
	t.Logf("64 callers, %s: %d admitted (bound %d), %d refused", elapsed.Round(time.Millisecond), ok.Load(), bound, refused.Load())
	if other.Load() != 0 {
		t.Errorf("%d calls failed otherwise, first: %v", other.Load(), firstOther.Load())
	}
	if ok.Load() > bound || ok.Load() < burst {
		t.Errorf("admitted %d, want between the burst %d and rate × elapsed + burst = %d", ok.Load(), burst, bound)
	}
	if refused.Load() == 0 {
		t.Error("no call was refused")
	}
}

// TestGRPCRedisDown kills a real Redis under shared policies: a policy
// that fails closed answers UNAVAILABLE, one that fails open lets the call
// through.
func TestGRPCRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	c, _ := grpcGateway(t, `  - name: closed
    match: {path: /grpc.testing.TestService/UnaryCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [shared-deny]
  - name: open
    match: {path: /grpc.testing.TestService/EmptyCall}
    upstream: UPSTREAM
    upstream_protocol: h2c
    policies: [shared-allow]`, `  shared-deny: {key: ip, algorithm: gcra, rate: 1000, per: 1s, on_redis_error: deny}
  shared-allow: {key: ip, algorithm: gcra, rate: 1000, per: 1s, on_redis_error: allow}`, "redis:\n  addrs: ["+rs.Addr()+"]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.UnaryCall(ctx, &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	rs.Kill()
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	if s := status.Convert(err); s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "shared-deny") {
		t.Fatalf("failing closed: got %v %q, want Unavailable naming the policy", s.Code(), s.Message())
	}
	// The test service does not implement EmptyCall: its own answer says
	// the call went through.
	_, err = c.EmptyCall(ctx, &testpb.Empty{})
	if s := status.Convert(err); s.Code() != codes.Unimplemented || !strings.Contains(s.Message(), "not implemented") {
		t.Fatalf("failing open: got %v %q, want the upstream's Unimplemented", s.Code(), s.Message())
	}
}

// TestGRPCTimeoutBoundsTheCall: a call's grpc-timeout, not the route's
// timeout, bounds it; past it, before the upstream answered, the gateway
// answers DEADLINE_EXCEEDED itself.
func TestGRPCTimeoutBoundsTheCall(t *testing.T) {
	_, base := grpcGateway(t, `  - name: slow
    match: {path_prefix: /grpc.testing.TestService/}
    upstream: UPSTREAM
    upstream_protocol: h2c
    timeout: 30s`, `  unused: {key: ip, rate: 1}`)
	// The first message comes after 3 s: the headers with it.
	slow := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1, IntervalUs: 3_000_000}}}
	req, _ := http.NewRequest(http.MethodPost, base+"/grpc.testing.TestService/StreamingOutputCall", bytes.NewReader(grpcFrame(slow)))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "200m")
	start := time.Now()
	resp, err := h2cClient(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Grpc-Status") != "4" || !strings.Contains(resp.Header.Get("Grpc-Message"), "grpc-timeout") {
		t.Fatalf("got HTTP %d, grpc-status %q %q; want 200, 4 (DEADLINE_EXCEEDED) naming grpc-timeout", resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"))
	}
	if took < 200*time.Millisecond || took >= 3*time.Second {
		t.Errorf("answered after %s, want about the 200 ms of grpc-timeout", took)
	}
}
