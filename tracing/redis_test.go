package tracing

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/internal/otlptest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

func newProvider(t *testing.T, rc *otlptest.Receiver, ratio float64) *Provider {
	t.Helper()
	tp, err := New(context.Background(), Config{Enabled: true, Endpoint: rc.URL, SampleRatio: &ratio}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// Concurrent decisions on a real Redis share pipelines. Each pipeline that
// carries a recorded decision has a span of its own, a root (no request's
// child), naming the node, linked to every recorded decision it carried,
// and each of those decisions links back to it and names the node. A
// decision that is not recorded gets no pipeline span and no link. On a
// Cluster each node's round trips name that node.
func TestRedisPipelineSpanLinksTheDecisionsItCarries(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		s := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: s.Addr()})
		checkPipelineSpans(t, client, []string{s.Addr()})
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t)
		client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		checkPipelineSpans(t, client, c.Addrs())
	})
}

func checkPipelineSpans(t *testing.T, client redis.UniversalClient, nodes []string) {
	t.Cleanup(func() { client.Close() })
	rc := otlptest.NewReceiver(t)
	tp := newProvider(t, rc, 1)
	Instrument(client, tp.TracerProvider(), "", redislimit.Members)
	rl, err := redislimit.New(client, redislimit.Config{Timeout: 2 * time.Second, QueueTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	isNode := func(attrs map[string]any) bool {
		for _, n := range nodes {
			if host, port, _ := net.SplitHostPort(n); attrs["server.address"] == host && attrs["server.port"] == port {
				return true
			}
		}
		return false
	}
	tracer := tp.TracerProvider().Tracer("test")
	rule := &limiter.Rule{Name: "per-key", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny}
	lim := limiter.Limit{Rate: 1000, Period: time.Second, Burst: 1000}

	const workers, rounds = 48, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	recorded := map[string]bool{} // span id of each recorded decision
	for round := range rounds {
		for w := range workers {
			wg.Go(func() {
				ctx := context.Background()
				var span trace.Span
				if w%2 == 0 { // half the decisions are traced
					ctx, span = tracer.Start(ctx, "decision")
					mu.Lock()
					recorded[span.SpanContext().SpanID().String()] = true
					mu.Unlock()
				}
				ds, _ := rl.Decide(ctx, []limiter.Check{{Rule: rule, Limit: lim, Key: fmt.Sprintf("k%d-%d", round, w)}}, nil)
				if len(ds) != 1 || !ds[0].Allowed {
					t.Errorf("decision: got %+v, want allowed", ds)
				}
				if span != nil {
					span.End()
				}
			})
		}
		wg.Wait()
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rc.Spans()

	pipelines := map[string]otlptest.Span{}
	decisions := map[string]otlptest.Span{}
	for _, sp := range spans {
		switch {
		case sp.Name == "decision":
			decisions[sp.SpanID] = sp
		case strings.HasPrefix(sp.Name, "redis "):
			// "redis pipeline", or a lone command such as the HELLO of a
			// connection dialled for the decision: each a round trip
			pipelines[sp.SpanID] = sp
		default:
			t.Errorf("unexpected span %q", sp.Name)
		}
	}
	if len(decisions) != len(recorded) {
		t.Fatalf("decision spans: got %d, want %d", len(decisions), len(recorded))
	}
	shared := 0
	backs := map[[2]string]bool{} // decision, pipeline: a pipeline's link to a decision
	for _, p := range pipelines {
		if p.ParentSpanID != "" {
			t.Errorf("pipeline span has parent %s, want a root", p.ParentSpanID)
		}
		if !isNode(p.Attrs) || p.Attrs["db.system.name"] != "redis" {
			t.Errorf("pipeline span attributes: %v, want one of the nodes %v", p.Attrs, nodes)
		}
		if len(p.Links) == 0 {
			t.Errorf("pipeline span %s links no decision: it should not exist", p.SpanID)
		}
		if len(p.Links) > 1 {
			shared++
		}
		for _, l := range p.Links {
			if _, ok := decisions[l.SpanID]; !ok {
				t.Errorf("pipeline links %s, which is no recorded decision", l.SpanID)
			}
			backs[[2]string{l.SpanID, p.SpanID}] = true
		}
	}
	// A decision may take several round trips (a connection dialled for
	// it, a script loaded again), so it links to each.
	for _, d := range decisions {
		if !isNode(d.Attrs) {
			t.Errorf("decision span: %v, want one of the nodes %v", d.Attrs, nodes)
		}
		if len(d.Links) == 0 {
			t.Errorf("decision %s links no pipeline", d.SpanID)
		}
		nodeLinked := false
		for _, l := range d.Links {
			p, ok := pipelines[l.SpanID]
			if !ok || p.TraceID != l.TraceID || !backs[[2]string{d.SpanID, l.SpanID}] {
				t.Errorf("decision %s links %v, which is not a pipeline linking back to it", d.SpanID, l)
				continue
			}
			nodeLinked = nodeLinked || p.Attrs["server.port"] == d.Attrs["server.port"]
		}
		if !nodeLinked {
			t.Errorf("decision %s names node port %v, which none of its round trips went to", d.SpanID, d.Attrs["server.port"])
		}
	}
	t.Logf("%d decisions (%d recorded) in %d recorded pipelines, %d of them carrying more than one recorded decision",
		workers*rounds, len(recorded), len(pipelines), shared)
	if shared == 0 {
		t.Errorf("no pipeline carried two recorded decisions: %d concurrent decisions were never gathered", workers)
	}
}
