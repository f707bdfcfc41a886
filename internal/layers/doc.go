// Package layers holds the test that keeps the module's imports pointing one
// way: the LLM vocabulary (llm) at the bottom, the config model (policies)
// on limiter and llm alone, the mock upstreams (builtin) off the handler,
// and the metrics and tracing packages off the handler and the Redis
// backend, which cmd wires to them. It has no code of its own.
package layers
