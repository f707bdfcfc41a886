package llm

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
func CountTokens(model, text string) int64 { return countIn(EncodingFor(model), text, Pace{}) }

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
		n[i] = countWhole(codecOf(enc), r)
	}
	return n
}

// countIn is CountTokens in the vocabulary enc, a long text counted at
// pace.
func countIn(enc Encoding, text string, pace Pace) int64 {
	for i, r := range roles {
		if text == r {
			return roleCounts(enc)[i]
		}
	}
	return countsOf(enc).count(text, func() int64 { return tokenize(enc, text, pace) })
}

// countBytesIn is countIn for text held as bytes (a request body's): a
// role, or a text counted lately, is found without converting text to a
// string.
func countBytesIn(enc Encoding, text []byte, pace Pace) int64 {
	for i, r := range roles {
		if string(text) == r {
			return roleCounts(enc)[i]
		}
	}
	return countsOf(enc).countBytes(text, func(s string) int64 { return tokenize(enc, s, pace) })
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

func tokenize(enc Encoding, text string, pace Pace) int64 {
	if text == "" {
		return 0
	}
	return countChunked(enc, text, chunkAbove, chunkBytes, pace)
}

// codecOf returns enc's tokenizer.
func codecOf(enc Encoding) *codec.Codec {
	if enc == Cl100kBase {
		return cl100k()
	}
	return o200k()
}

// countChunked counts text in enc, in chunks of at least size bytes while
// more than above are left (see nextCut), with a pieceCounter, pausing
// between chunks as pace asks.
func countChunked(enc Encoding, text string, above, size int, pace Pace) int64 {
	c := codecOf(enc)
	if len(text) <= above {
		return countShort(c, vocabOf(enc), text)
	}
	p := newPieceCounter(c, vocabOf(enc))
	defer p.release()
	var n int64
	var owed time.Duration
	for len(text) > above {
		i := nextCut(text, size)
		if i < 0 {
			break // no cut left: the rest is counted in one piece
		}
		chunk := text[:i]
		owed += pace.run(func() { n += p.count(chunk) })
		text = text[i:]
		if owed >= pacePause {
			owed = pace.pause(owed)
			continue
		}
		// A large prompt counts for tens of milliseconds; between chunks
		// the small calls waiting for this P get it.
		runtime.Gosched()
	}
	return n + p.count(text)
}

// Pace is how much of a core the count of one long text (over chunkAbove
// bytes) may take. Counting holds a core for tens of milliseconds a MiB,
// and on a machine whose cores are all busy (the gateway's other calls,
// a sidecar, the kernel moving the bodies) whatever waits for that core
// waits for the count: the small calls beside a large prompt see it in
// their p99. So after each chunk the count owes a pause of
// (1-Share)/Share of the time the chunk took, and takes it once it owes
// pacePause or more; a pause that ran over (a sleep is rarely exact) is
// owed back by the chunks after it. The zero Pace never pauses.
type Pace struct {
	// Share is the share of one core, in (0, 1); 0, or 1 and above,
	// never pauses.
	Share float64
	// Now and Sleep are the clock; nil means time.Now and time.Sleep.
	Now   func() time.Time
	Sleep func(time.Duration)
}

// pacePause is the shortest pause a count takes: shorter sleeps cost about
// as much as they last (a timer, two switches) and an idle Go scheduler
// rounds them up to a millisecond anyway.
const pacePause = time.Millisecond

func (p Pace) paces() bool { return p.Share > 0 && p.Share < 1 }

// run runs one chunk's count and returns the pause it owes.
func (p Pace) run(count func()) time.Duration {
	if !p.paces() {
		count()
		return 0
	}
	start := p.now()
	count()
	return time.Duration(float64(p.now().Sub(start)) * (1 - p.Share) / p.Share)
}

// pause sleeps for owed and returns what is still owed: negative when the
// sleep ran over.
func (p Pace) pause(owed time.Duration) time.Duration {
	start := p.now()
	if p.Sleep != nil {
		p.Sleep(owed)
	} else {
		time.Sleep(owed)
	}
	return owed - p.now().Sub(start)
}

func (p Pace) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func countWhole(c *codec.Codec, text string) int64 {
	n, err := c.Count(text)
	if err != nil {
		// Count fails only when the split regexp gives up (it has no
		// timeout set, so in practice never); a bytes/4 estimate keeps the
		// reservation from being zero.
		return int64(len(text)+3) / 4
	}
	return int64(n)
}

// A text longer than chunkAbove bytes is counted in chunks of about
// chunkBytes, each cut where the count of the parts is the whole's. The
// tokenizer splits a text with its vocabulary's pre-tokenizer regexp and
// encodes each piece alone, so a cut between two pieces that the regexp
// finds in the whole text, where the pieces before it are found the same
// way without the text after it and those after it the same way without
// the text before it, adds up exactly. nextCut finds such a cut.
const (
	chunkAbove = 32 << 10
	chunkBytes = 16 << 10
)

// nextCut returns the first index i >= from where a letter ends and a
// character that is neither a letter, a mark nor an apostrophe begins:
// text[:i] ends with a valid UTF-8 encoding of a letter (\p{L}) and text[i:]
// begins with a valid one of anything else but a mark (\p{M}) or an
// apostrophe; -1 if there is none. In English that is after a word, before a space or
// punctuation; in Chinese or Japanese, which have no spaces, before a
// punctuation mark (、。，「), or a digit.
//
// Both vocabularies' pre-tokenizer regexps (o200kPattern, cl100kPattern)
// split such a text there, whatever surrounds it:
//   - a letter is consumed only by the letter alternatives (and the
//     contractions, which end in a letter): the other alternatives'
//     classes all exclude \p{L}. After a letter the letter alternatives go
//     on only with another letter or mark, or with an apostrophe (a
//     contraction). The character at i is none of these, so the piece
//     holding the letter before i ends at i, and every path the matcher
//     tries while reading text[i] fails there as it fails at the end of
//     text[:i]: the pieces of text[:i] are the same with or without the
//     rest;
//   - the regexp has no look-behind and no anchor, so the pieces from i on
//     are the same with or without what comes before i;
//   - i is the first byte of a valid UTF-8 sequence, and text[:i] ends
//     with a whole valid one; a valid sequence's first byte is never a
//     continuation byte, so no sequence before it (valid or not) decodes
//     across it: the decoding into runes of both sides is the whole's.
//
// TestChunkedCountIsExact and FuzzChunkedCount check it against the
// tokenizer on whole texts.
func nextCut(text string, from int) int {
	for i := max(from, 1); i < len(text); i++ {
		b := text[i]
		if b < utf8.RuneSelf {
			if isASCIILetter(b) || b == '\'' {
				continue
			}
		} else if !utf8.RuneStart(b) || !endsWord(text[i:]) {
			continue
		}
		if endsLetter(text[:i]) {
			return i
		}
	}
	return -1
}

// endsLetter reports whether text ends with a valid UTF-8 letter.
func endsLetter(text string) bool {
	if b := text[len(text)-1]; b < utf8.RuneSelf {
		return isASCIILetter(b)
	}
	r, size := utf8.DecodeLastRuneInString(text)
	return size > 1 && unicode.IsLetter(r)
}

// endsWord reports whether text begins with a valid multi-byte UTF-8
// character that is neither a letter nor a mark: one before which a
// letter's piece ends.
func endsWord(text string) bool {
	r, size := utf8.DecodeRuneInString(text)
	return size > 1 && !unicode.IsLetter(r) && !unicode.IsMark(r)
}

func isASCIILetter(b byte) bool { return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' }

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
	if n, ok := c.lookup(text); ok {
		return n
	}
	n := tokenize()
	c.put(text, n)
	return n
}

// lookup returns text's count if the cache holds it.
func (c *countCache) lookup(text string) (int64, bool) {
	s := &c.shards[maphash.String(shardSeed, text)%countShards]
	s.mu.Lock()
	n, ok := s.cur[text]
	if !ok {
		if n, ok = s.old[text]; ok {
			s.add(text, n) // still in use: it outlives the old generation
		}
	}
	s.mu.Unlock()
	return n, ok
}

// put remembers text's count.
func (c *countCache) put(text string, n int64) {
	s := &c.shards[maphash.String(shardSeed, text)%countShards]
	s.mu.Lock()
	if _, ok := s.cur[text]; !ok {
		s.add(text, n)
	}
	s.mu.Unlock()
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
