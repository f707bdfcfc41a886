package proxy

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/builtin"
	"github.com/ratelimit-gateway/gateway/internal/imagetest"
	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
)

// The accounting suite: for each cost a quota can count (tokens,
// input_tokens, output_tokens, usd), on one instance and on two sharing a
// real Redis, every way a call can be made to bill more than it looks is
// sent 64 times at once, and what the upstream itself says it billed for
// the calls the gateway let through stays within the quota, plus what the
// quota refilled while the case ran (rate × elapsed). The upstream is the
// built-in mock, billing like the providers: text with the provider's
// tokenizer, images, audio and files by the published formulas, 2,000
// reasoning tokens before the first visible one, 1,500 visible tokens when
// no cap stops it, n choices, and every accepted call whole, even one its
// client left.

const accountingCalls = 64

// accountingQuota is each cost's quota and how the mock's bill is read in
// its unit.
var accountingQuotas = []struct {
	cost   string
	rate   int64 // in the file: tokens, or whole dollars
	quota  int64 // in the bucket's unit
	billed func(builtin.MockBill) int64
}{
	{"tokens", 50_000, 50_000, func(b builtin.MockBill) int64 { return b.Total() }},
	{"input_tokens", 20_000, 20_000, func(b builtin.MockBill) int64 { return b.Input }},
	{"output_tokens", 20_000, 20_000, func(b builtin.MockBill) int64 { return b.Output }},
	// prices: input $20, output $80 a million tokens: 20 and 80 µ$ a token.
	{"usd", 1, 1_000_000, func(b builtin.MockBill) int64 { return 20*b.Input + 80*b.Output + b.MicroUSD }},
}

const accountingYAML = `
REDIS
routes:
  - {name: slow, upstream: "SLOW", llm: openai, timeout: 200ms, strip_prefix: /slow, match: {path_prefix: /slow/}, policies: [quota]}
  - {name: llm, upstream: "UPSTREAM", llm: openai, match: {path_prefix: /v1/}, policies: [quota]}
policies:
  quota: {key: "header:X-Tenant", algorithm: ALGO, rate: RATE, per: 1h, cost: COST}
prices:
  default: {input: 20, output: 80}
models:
  gpt-4o: {file_tokens: 3000}
  gpt-image: {prefixes: [gpt-image-], default_max_tokens: 4096, max_output_tokens: 65536, context_window: 128000, image_low: 6240, image_high: 6240}
`

// how a client treats its answer.
type clientWay int

const (
	readAll   clientWay = iota
	cutAtByte           // hang up after some bytes of the answer
	retry429            // read it all; on 429 try again, three times
)

type accountingCase struct {
	name   string
	method string
	path   string
	body   func(i int) string
	way    clientWay
	header http.Header
	// want400 says every call is refused with 400 in OpenAI's shape;
	// refused, that every call gets that status and nothing is billed.
	want400 bool
	refused int
}

func accountingCases(t *testing.T) []accountingCase {
	chat := func(model, extra string) func(int) string {
		return func(int) string {
			return `{"model":"` + model + `","messages":[{"role":"user","content":"Tell me about rate limits."}]` + extra + `}`
		}
	}
	parts := func(model, extra string, part func(i int) string) func(int) string {
		return func(i int) string {
			return `{"model":"` + model + `","messages":[{"role":"user","content":[{"type":"text","text":"What is this?"},` + part(i) + `]}]` + extra + `}`
		}
	}
	img := imagetest.PNGDataURL(t, 1024, 1024)
	images := []string{
		`{"type":"image_url","image_url":{"url":"` + img + `","detail":"low"}}`,
		`{"type":"image_url","image_url":{"url":"` + img + `","detail":"high"}}`,
		`{"type":"image_url","image_url":{"url":"` + img + `"}}`,
		`{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"auto"}}`,
		`{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}`,
	}
	wav := make([]byte, 44+8000) // a quarter of a second at 32,000 bytes a second
	copy(wav, "RIFF")
	copy(wav[8:], "WAVE")
	binary.LittleEndian.PutUint32(wav[28:], 32000)
	audio := `{"type":"input_audio","input_audio":{"format":"wav","data":"` + base64.StdEncoding.EncodeToString(wav) + `"}}`
	pdf := "data:application/pdf;base64," + base64.StdEncoding.EncodeToString([]byte("%PDF-1.4 /Type /Pages /Type /Page "+strings.Repeat("text ", 200)))
	files := []string{
		`{"type":"file","file":{"filename":"a.pdf","file_data":"` + pdf + `"}}`,
		`{"type":"file","file":{"file_id":"file-abc"}}`,
	}
	form := http.Header{"Content-Type": {"multipart/form-data; boundary=XBOUNDARY"}}
	upload := func(model string, fileBytes int, extra string) func(int) string {
		return func(int) string {
			return "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model + "\r\n" + extra +
				"--XBOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.ogg\"\r\nContent-Type: audio/ogg\r\n\r\n" +
				strings.Repeat("\x01", fileBytes) + "\r\n--XBOUNDARY--\r\n"
		}
	}
	imageForm := func(model, extra string, files ...string) func(int) string {
		return func(int) string {
			b := "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + model + "\r\n" + extra
			for _, f := range files {
				b += "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"" + f + "\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n" +
					strings.Repeat("\x02", 2000) + "\r\n"
			}
			return b + "--XBOUNDARY--\r\n"
		}
	}
	// hidden is about 2,000 tokens of text a provider bills, hidden in one
	// field the gateway's count once skipped.
	hidden := strings.Repeat("quota bypass ", 1000)
	responses := func(body string) func(int) string { return func(int) string { return body } }
	sdkJSON := http.Header{"Accept-Encoding": {"gzip, deflate"}}       // the openai and Anthropic SDKs
	nodeFetch := http.Header{"Accept-Encoding": {"br, gzip, deflate"}} // Node's fetch over HTTPS
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	return []accountingCase{
		{name: "max_tokens at int64's max", body: chat("gpt-4o-mini", `,"max_tokens":9223372036854775807`), want400: true},
		{name: "max_tokens past int64", body: chat("gpt-4o-mini", `,"max_tokens":9223372036854775808`), want400: true},
		{name: "n times max_tokens wraps", body: chat("gpt-4o-mini", `,"max_tokens":4611686018427387904,"n":2`), want400: true},
		{name: "max_tokens past the model's", body: chat("gpt-4o-mini", `,"max_tokens":16385`), want400: true},
		{name: "negative max_tokens", body: chat("gpt-4o-mini", `,"max_tokens":-1`), want400: true},
		{name: "max_tokens 0", body: chat("gpt-4o-mini", `,"max_tokens":0`), want400: true},
		{name: "two caps, the larger past the model's", body: chat("gpt-4o-mini", `,"max_completion_tokens":10,"max_tokens":1000000000`), want400: true},
		{name: "two caps, max_tokens the larger", body: chat("gpt-4o-mini", `,"max_completion_tokens":10,"max_tokens":1500`)},
		{name: "n past 128", body: chat("gpt-4o-mini", `,"n":129`), want400: true},
		{name: "no cap: generates to its end", body: chat("gpt-4o-mini", ``)},
		{name: "no cap, n=4", body: chat("gpt-4o-mini", `,"n":4`)},
		{name: "no cap, stream cut at any byte", body: chat("gpt-4o-mini", `,"stream":true`), way: cutAtByte},
		{name: "reasoning stream cut before its first token", body: chat("o3", `,"stream":true,"max_completion_tokens":3000`), way: cutAtByte},
		{name: "reasoning stream with no cap, cut", body: chat("o3-mini", `,"stream":true`), way: cutAtByte},
		{name: "responses stream with no cap, cut", path: "/v1/responses", way: cutAtByte,
			body: func(int) string { return `{"model":"gpt-5","input":"Tell me about rate limits.","stream":true}` }},
		{name: "responses with no cap", path: "/v1/responses",
			body: func(int) string { return `{"model":"gpt-4o-mini","input":"Tell me about rate limits."}` }},
		{name: "images at each detail, inline and by URL", body: parts("gpt-4o-mini", `,"max_tokens":10`, func(i int) string { return images[i%len(images)] })},
		{name: "images on a patch model", body: parts("gpt-4.1-mini", `,"max_tokens":10`, func(i int) string { return images[i%len(images)] })},
		{name: "audio", body: parts("gpt-4o-audio-preview", `,"max_tokens":10`, func(int) string { return audio })},
		{name: "files inline and by id", body: parts("gpt-4o", `,"max_tokens":10`, func(i int) string { return files[i%len(files)] })},
		{name: "files on a model with the default bound", body: parts("gpt-4o-mini", `,"max_tokens":10`, func(i int) string { return files[i%len(files)] })},
		{name: "previous_response_id", path: "/v1/responses", want400: true,
			body: func(int) string { return `{"model":"o3","input":"and then?","previous_response_id":"resp_1"}` }},
		{name: "built-in tool", path: "/v1/responses", want400: true,
			body: func(int) string { return `{"model":"o3","input":"news?","tools":[{"type":"web_search"}]}` }},
		{name: "websocket upgrade", method: http.MethodGet, path: "/v1/realtime?model=gpt-4o-realtime-preview", header: upgrade, want400: true,
			body: func(int) string { return `` }},
		{name: "the upstream never answers", path: "/slow/v1/chat/completions", body: chat("gpt-4o-mini", ``)},
		{name: "gpt-image, two images at auto size and quality", path: "/v1/images/generations",
			body: func(int) string { return `{"model":"gpt-image-1","prompt":"A lighthouse at dawn.","n":2}` }},
		{name: "gpt-image streamed with partial images", path: "/v1/images/generations",
			body: func(int) string {
				return `{"model":"gpt-image-1","prompt":"A lighthouse.","n":2,"quality":"high","size":"1024x1024","stream":true,"partial_images":3}`
			}},
		{name: "dall-e-3 hd, the widest", path: "/v1/images/generations",
			body: func(int) string {
				return `{"model":"dall-e-3","prompt":"A lighthouse.","quality":"hd","size":"1792x1024"}`
			}},
		{name: "dall-e-2, ten images", path: "/v1/images/generations",
			body: func(int) string { return `{"model":"dall-e-2","prompt":"A lighthouse.","n":10}` }},
		{name: "image without a model", path: "/v1/images/generations", want400: true,
			body: func(int) string { return `{"prompt":"A lighthouse.","n":10}` }},
		{name: "tts-1-hd, 4,096 characters", path: "/v1/audio/speech",
			body: func(int) string {
				return `{"model":"tts-1-hd","voice":"alloy","input":"` + strings.Repeat("a", 4096) + `"}`
			}},
		{name: "gpt-4o-mini-tts at the slowest speed", path: "/v1/audio/speech",
			body: func(int) string {
				return `{"model":"gpt-4o-mini-tts","voice":"alloy","speed":0.25,"input":"` + strings.Repeat("word ", 100) + `"}`
			}},
		{name: "whisper, 30 kB", path: "/v1/audio/transcriptions", header: form, body: upload("whisper-1", 30_000, "")},
		{name: "gpt-4o-transcribe, 300 kB with a prompt", path: "/v1/audio/transcriptions", header: form,
			body: upload("gpt-4o-transcribe", 300_000, "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\n"+strings.Repeat("words ", 200)+"\r\n")},
		{name: "translation, a model set twice", path: "/v1/audio/translations", header: form, want400: true,
			body: upload("whisper-1", 3000, "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-transcribe\r\n")},
		{name: "embeddings", path: "/v1/embeddings",
			body: func(int) string {
				return `{"model":"text-embedding-3-small","input":["` + strings.Repeat("text ", 300) + `","more"]}`
			}},
		{name: "moderations", path: "/v1/moderations",
			body: func(int) string { return `{"input":"` + strings.Repeat("text ", 300) + `"}` }},
		{name: "batches", path: "/v1/batches", refused: http.StatusForbidden,
			body: func(int) string { return `{"input_file_id":"file-1","endpoint":"/v1/chat/completions"}` }},
		{name: "gpt-image edit of two images and a mask", path: "/v1/images/edits", header: form,
			body: imageForm("gpt-image-1", "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nMake it night.\r\n", "image[]", "image[]", "mask")},
		{name: "dall-e-2 variations, ten", path: "/v1/images/variations", header: form,
			body: imageForm("dall-e-2", "--XBOUNDARY\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n10\r\n", "image")},
		{name: "image edit with a file of another name", path: "/v1/images/edits", header: form, want400: true,
			body: imageForm("gpt-image-1", "", "image", "picture")},
		{name: "an endpoint no provider declares", path: "/v1/imagines/generations", refused: http.StatusNotFound,
			body: func(int) string { return `{"model":"gpt-image-1","prompt":"x","n":10}` }},
		{name: "clients retrying", body: chat("gpt-4o-mini", ``), way: retry429},
		// Input a provider bills that the count once skipped.
		{name: "hidden: legacy function_call", body: func(int) string {
			return `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"go"},` +
				`{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"` + hidden + `"}}]}`
		}},
		{name: "hidden: custom tool input", body: func(int) string {
			return `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"go"},` +
				`{"role":"assistant","tool_calls":[{"id":"c1","type":"custom","custom":{"name":"f","input":"` + hidden + `"}}]}]}`
		}},
		{name: "hidden: response_format schema", body: chat("gpt-4o-mini",
			`,"max_tokens":50,"response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object","description":"`+hidden+`"}}}`)},
		{name: "hidden: a field of tomorrow", body: chat("gpt-4o-mini", `,"max_tokens":50,"tomorrow":{"notes":["`+hidden+`"]}`)},
		{name: "hidden: a prediction, billed as output", body: chat("gpt-4o-mini", `,"max_tokens":50,"prediction":{"type":"content","content":"`+hidden+`"}`)},
		{name: "hidden: text.format schema", path: "/v1/responses", body: responses(
			`{"model":"gpt-4o-mini","max_output_tokens":50,"input":"go","text":{"format":{"type":"json_schema","name":"s","schema":{"description":"` + hidden + `"}}}}`)},
		{name: "hidden: file_search_call results", path: "/v1/responses", body: responses(
			`{"model":"gpt-4o-mini","max_output_tokens":50,"input":[{"role":"user","content":"go"},` +
				`{"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":[{"file_id":"f","text":"` + hidden + `"}]}]}`)},
		// Answers in gzip: the mock compresses when asked, as the providers do.
		{name: "gzip: JSON with the SDKs' Accept-Encoding", body: chat("gpt-4o-mini", ``), header: sdkJSON},
		{name: "gzip: stream with Node fetch's Accept-Encoding", body: chat("gpt-4o-mini", `,"stream":true,"max_tokens":200`), header: nodeFetch},
		{name: "gzip: stream cut, Node fetch's Accept-Encoding", body: chat("gpt-4o-mini", `,"stream":true`), header: nodeFetch, way: cutAtByte},
	}
}

func TestAccountingBilledNeverPassesTheQuota(t *testing.T) {
	mock := builtin.OpenAIMock(builtin.OpenAIMockConfig{
		CompletionTokens: 1500, ReasoningTokens: 2000,
		CountTokens: func(model, s string) int { return int(llm.CountTokens(model, s)) },
	})
	up := newUpstream(t, mock).URL
	// The slow upstream accepts (and bills) each call, then never answers.
	slow := builtin.OpenAIMock(builtin.OpenAIMockConfig{
		CompletionTokens: 1500, FirstByteLatency: time.Hour,
		CountTokens: func(model, s string) int { return int(llm.CountTokens(model, s)) },
		Sleep: func(ctx context.Context, _ time.Duration) error {
			<-ctx.Done()
			return ctx.Err()
		},
	})
	slowURL := newUpstream(t, slow).URL
	billed := func() builtin.MockBill {
		a, b := mock.Billed(), slow.Billed()
		return builtin.MockBill{Calls: a.Calls + b.Calls, Input: a.Input + b.Input, Output: a.Output + b.Output,
			Reasoning: a.Reasoning + b.Reasoning, MicroUSD: a.MicroUSD + b.MicroUSD}
	}
	cases := accountingCases(t)

	for _, topo := range []string{"one instance", "two instances on redis"} {
		t.Run(topo, func(t *testing.T) {
			engines, redisLine, algo := accountingTopology(t, topo)
			for _, q := range accountingQuotas {
				t.Run(q.cost, func(t *testing.T) {
					yaml := strings.NewReplacer("REDIS", redisLine, "SLOW", slowURL, "ALGO", algo,
						"RATE", fmt.Sprint(q.rate), "COST", q.cost).Replace(accountingYAML)
					var bases []string
					for _, e := range engines {
						base, _ := gatewayOn(t, yaml, up, e)
						bases = append(bases, base)
					}
					for _, c := range cases {
						t.Run(c.name, func(t *testing.T) {
							tenant := topo + "/" + q.cost + "/" + c.name
							before := billed()
							start := time.Now()
							statuses := runAccountingCase(t, bases, tenant, c)
							elapsed := time.Since(start)
							after := billed()
							got := q.billed(after) - q.billed(before)
							// What the quota refilled while the case ran (none
							// on the local engine, whose clock stands still).
							refill := int64(0)
							if len(engines) > 1 {
								refill = int64(math.Ceil(float64(q.quota) * elapsed.Seconds() / 3600))
							}
							t.Logf("%d calls: %v; billed %d of %d (+%d refilled)", accountingCalls, statuses, got, q.quota, refill)
							if got > q.quota+refill {
								t.Errorf("the upstream billed %d for the admitted calls, past the quota %d + %d refilled", got, q.quota, refill)
							}
							if c.want400 {
								if statuses[http.StatusBadRequest] != accountingCalls || got != 0 {
									t.Errorf("got %v and %d billed, want every call refused with 400 and nothing billed", statuses, got)
								}
							}
							if c.refused != 0 {
								if statuses[c.refused] != accountingCalls || after.Calls != before.Calls {
									t.Errorf("got %v and %d calls billed, want every call refused with %d and none reaching the upstream", statuses, after.Calls-before.Calls, c.refused)
								}
							}
						})
					}
				})
			}
		})
	}
}

// runAccountingCase sends the case's calls at once, alternating between
// the gateways, and counts the answers by status.
func runAccountingCase(t *testing.T, bases []string, tenant string, c accountingCase) map[int]int {
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range accountingCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				status, err := accountingCall(client, bases[(i+attempt)%len(bases)], tenant, c, i)
				if err != nil {
					t.Error(err)
					return
				}
				if c.way == retry429 && status == http.StatusTooManyRequests && attempt < 3 {
					continue
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	return statuses
}

func accountingCall(client *http.Client, base, tenant string, c accountingCase, i int) (int, error) {
	method, path := c.method, c.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = "/v1/chat/completions"
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(c.body(i)))
	if err != nil {
		return 0, err
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Tenant", tenant)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if c.want400 && resp.StatusCode == http.StatusBadRequest {
		var e struct {
			Error *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type != "invalid_request_error" {
			return 0, fmt.Errorf("%s: a 400 not in OpenAI's shape (%v)", c.name, err)
		}
		return resp.StatusCode, nil
	}
	if c.way == cutAtByte && resp.StatusCode == http.StatusOK {
		// Hang up after 1 to 600 bytes: before the first visible token,
		// inside an event, between two.
		io.CopyN(io.Discard, resp.Body, int64(1+i*37%600))
		return resp.StatusCode, nil
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// accountingTopology is what the accounting suites run on: one instance
// with local buckets, or two engines sharing a real redis-server; with the
// config's redis line and the algorithm its policies then use.
func accountingTopology(t *testing.T, topo string) (engines []*limiter.Engine, redisLine, algo string) {
	t.Helper()
	if topo == "one instance" {
		return []*limiter.Engine{newEngine(t, newTestClock())}, "", "token_bucket"
	}
	s := redistest.Start(t)
	client, err := redisclient.New(redisclient.Options{Addrs: []string{s.Addr()}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return []*limiter.Engine{engineOn(t, client), engineOn(t, client)}, `redis: {addrs: ["` + s.Addr() + `"]}`, "gcra"
}
