package llm

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer/codec"
)

// Encoding names a tokenizer vocabulary.
type Encoding string

// The vocabularies this package counts with; both are compiled into the
// binary by github.com/tiktoken-go/tokenizer.
const (
	O200kBase  Encoding = "o200k_base"
	Cl100kBase Encoding = "cl100k_base"
)

// The codecs are built on first use: building o200k's vocabulary map costs
// tens of milliseconds and a few tens of MB, which a gateway without LLM
// routes should not pay. A *codec.Codec is safe for concurrent Count calls
// as long as its error mode is not changed, and it never is here.
var (
	o200k  = sync.OnceValue(codec.NewO200kBase)
	cl100k = sync.OnceValue(codec.NewCl100kBase)
)

// EncodingFor returns the vocabulary a model counts with, by prefix of its
// name: gpt-4o*, chatgpt-4o*, gpt-4.1*, gpt-5*, o1*, o3*, o4* use
// o200k_base; other gpt-4* and gpt-3.5* (and text-embedding-3*, ada-002)
// use cl100k_base. A fine-tuned name ("ft:gpt-4o-mini:org::id") counts as
// its base model. Unknown models, including non-OpenAI ones, use
// o200k_base: for typical English text it gives counts within a few percent
// of other modern vocabularies, and the provider's usage corrects the
// reservation anyway.
func EncodingFor(model string) Encoding {
	m := strings.ToLower(strings.TrimPrefix(model, "ft:"))
	// Azure and some routers prefix the provider: "openai/gpt-4o".
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range []string{"gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4"} {
		if strings.HasPrefix(m, p) {
			return O200kBase
		}
	}
	for _, p := range []string{"gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002"} {
		if strings.HasPrefix(m, p) {
			return Cl100kBase
		}
	}
	return O200kBase
}

// CountTokens returns the number of tokens text encodes to in model's
// vocabulary (see EncodingFor). It is safe for concurrent use.
func CountTokens(model, text string) int64 { return countIn(EncodingFor(model), text) }

// roles are the message roles the APIs define. Every message counts its
// role, and a short text costs the tokenizer a good part of what a long
// one does (its matcher is set up per call), so each vocabulary counts
// them once.
var roles = [...]string{"system", "user", "assistant", "developer", "tool", "function"}

var (
	o200kRoles  = sync.OnceValue(func() [len(roles)]int64 { return countRoles(O200kBase) })
	cl100kRoles = sync.OnceValue(func() [len(roles)]int64 { return countRoles(Cl100kBase) })
)

func countRoles(enc Encoding) [len(roles)]int64 {
	var n [len(roles)]int64
	for i, r := range roles {
		n[i] = tokenize(enc, r)
	}
	return n
}

// countIn is CountTokens in the vocabulary enc.
func countIn(enc Encoding, text string) int64 {
	for i, r := range roles {
		if text == r {
			return roleCounts(enc)[i]
		}
	}
	return countsOf(enc).count(text, func() int64 { return tokenize(enc, text) })
}

// countBytesIn is countIn for text held as bytes (a request body's): a
// role, or a text counted lately, is found without converting text to a
// string.
func countBytesIn(enc Encoding, text []byte) int64 {
	for i, r := range roles {
		if string(text) == r {
			return roleCounts(enc)[i]
		}
	}
	return countsOf(enc).countBytes(text, func(s string) int64 { return tokenize(enc, s) })
}

func roleCounts(enc Encoding) [len(roles)]int64 {
	if enc == Cl100kBase {
		return cl100kRoles()
	}
	return o200kRoles()
}

func countsOf(enc Encoding) *countCache {
	if enc == Cl100kBase {
		return &cl100kCounts
	}
	return &o200kCounts
}

func tokenize(enc Encoding, text string) int64 {
	if text == "" {
		return 0
	}
	c := o200k()
	if enc == Cl100kBase {
		c = cl100k()
	}
	n, err := c.Count(text)
	if err != nil {
		// Count fails only when the split regexp gives up (it has no
		// timeout set, so in practice never); a bytes/4 estimate keeps the
		// reservation from being zero.
		return int64(len(text)+3) / 4
	}
	return int64(n)
}

// Calls resend the same texts: a conversation's earlier turns, its system
// prompt and tools on every call. The tokenizer's cost is mostly per
// match of its split pattern (a few allocations each), whatever the
// text's size, so each vocabulary keeps the counts of texts it counted
// lately, keyed by the whole text (a count is looked up only for the very
// same text: it is exact). Bounded: texts up to maxCachedText bytes, each
// shard holding two generations of up to shardBytes each (about 4 MiB a
// vocabulary at most, with map overhead); when the current one is full it
// becomes the old one and the oldest is dropped, so what is used keeps
// being found.
const (
	maxCachedText = 16 << 10
	countShards   = 16
	shardBytes    = 128 << 10
	entryOverhead = 64 // a map entry and the string's header, roughly
)

var (
	o200kCounts  countCache
	cl100kCounts countCache
	shardSeed    = maphash.MakeSeed()
)

// countCache maps texts to their token counts in one vocabulary. The zero
// value is ready; it is safe for concurrent use.
type countCache struct {
	shards [countShards]countShard
}

type countShard struct {
	mu       sync.Mutex
	cur, old map[string]int64
	bytes    int // the size of cur's entries
}

// count returns text's count, from the cache or from counting it (outside
// the lock) with tokenize.
func (c *countCache) count(text string, tokenize func() int64) int64 {
	if len(text) > maxCachedText {
		return tokenize()
	}
	s := &c.shards[maphash.String(shardSeed, text)%countShards]
	s.mu.Lock()
	n, ok := s.cur[text]
	if !ok {
		if n, ok = s.old[text]; ok {
			s.add(text, n) // still in use: it outlives the old generation
		}
	}
	s.mu.Unlock()
	if ok {
		return n
	}
	n = tokenize()
	s.mu.Lock()
	if _, ok := s.cur[text]; !ok {
		s.add(text, n)
	}
	s.mu.Unlock()
	return n
}

// countBytes is count for text held as bytes: a text of the current
// generation is found by its bytes (Go converts nothing to look a map up
// by string(b)); anything else goes through count as a string.
func (c *countCache) countBytes(text []byte, tokenize func(string) int64) int64 {
	if len(text) <= maxCachedText {
		s := &c.shards[maphash.Bytes(shardSeed, text)%countShards]
		s.mu.Lock()
		n, ok := s.cur[string(text)]
		s.mu.Unlock()
		if ok {
			return n
		}
	}
	t := string(text)
	return c.count(t, func() int64 { return tokenize(t) })
}

// add puts text's count in the current generation, which becomes the old
// one first when full. The text is copied: it may be part of a larger
// string the cache should not keep.
func (s *countShard) add(text string, n int64) {
	if s.cur == nil || s.bytes >= shardBytes {
		s.old, s.cur, s.bytes = s.cur, make(map[string]int64), 0
	}
	s.cur[strings.Clone(text)] = n
	s.bytes += len(text) + entryOverhead
}
