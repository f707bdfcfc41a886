package admin_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimit-gateway/gateway/admin"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// The admin handler is built once from what the process already has: the
// snapshot in force, the engine, the reload of the config watcher. Here it
// serves on a test listener; the gateway serves it on admin.listen.
func ExampleNew() {
	snap, err := policies.Parse("gateway.yaml", []byte(`
routes: [{name: api, upstream: builtin:echo, policies: [per-ip]}]
policies:
  per-ip: {key: ip, rate: 5, per: 1m}
`), policies.Options{})
	if err != nil {
		log.Fatal(err)
	}
	engine, _ := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
	h, err := admin.New(admin.Config{
		Token:     "s3cret-token-0b5f2e9a47c1d863e7a2",
		Snapshots: policies.NewCurrent(snap),
		Keys:      admin.EngineKeys{Engine: engine},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(path, token string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	get("/healthz", "")
	get("/admin/keys?policy=per-ip&key=203.0.113.7/32", "")
	get("/admin/keys?policy=per-ip&key=203.0.113.7/32", "s3cret-token-0b5f2e9a47c1d863e7a2")
	// Output:
	// 200 {"status":"ok"}
	// 401 {"code":40100,"message":"this endpoint needs Authorization: Bearer <admin.token>"}
	// 200 {"policy":"per-ip","key":"203.0.113.7/32","algorithm":"token_bucket","backend":"local","limit":5,"per":"1m","allowed":true,"remaining":5,"reset_after_ms":0,"retry_after_ms":0}
}
