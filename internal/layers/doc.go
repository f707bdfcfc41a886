// Package layers holds the test that keeps the module's imports pointing one
// way: the LLM vocabulary (llm) at the bottom, the config model (policies)
// on limiter and llm alone, the mock upstreams (builtin) off the handler,
// the metrics and tracing packages off the handler and the Redis backend,
// which cmd wires to them, and the lean HTTP/1.1 server and transport
// (proxy/h1) known to cmd alone. It has no code of its own.
package layers
