package llm

import (
	"sync"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer/codec"
)

// The tokenizer's Count allocates a match object of a few hundred bytes for
// every piece its pre-tokenizer regexp finds, and a string for the piece:
// ~57 MB for a MiB of prose, which keeps the collector running while large
// prompts are counted, and the small calls beside them pay for it, and
// regexp2's run of the generated matcher is nearly all a count's time. A
// text is counted here instead from its pieces' byte ranges, found by a
// scan of our own that follows that matcher (split.go), and each distinct
// piece is encoded once (by Count, on the piece alone) and then looked up:
// the same sum, since the tokenizer encodes every piece on its own.

// vocab is what counting needs of one vocabulary besides its codec.
type vocab struct {
	// pieces appends the byte ranges of s's pieces (s valid UTF-8) to dst.
	pieces func(s string, dst [][2]int) [][2]int
	// memory is the process's memory of the vocabulary's pieces' tokens:
	// the words and spaces of one prompt are mostly those of the prompts
	// before it, and a piece found here is not encoded again. Bounded as
	// the text counts are (countCache).
	memory *countCache
}

var (
	o200kPieceCounts, cl100kPieceCounts countCache

	o200kVocab  = vocab{pieces: o200kPieces, memory: &o200kPieceCounts}
	cl100kVocab = vocab{pieces: cl100kPieces, memory: &cl100kPieceCounts}
)

func vocabOf(enc Encoding) vocab {
	if enc == Cl100kBase {
		return cl100kVocab
	}
	return o200kVocab
}

// Short texts (chunkAbove or less) are counted from their pieces when the
// memory holds most of them; otherwise by Count whole, the memory then
// learning up to learnPieces of the new ones (at a few µs each), so that
// it fills with what is used.
const learnPieces = 8

// maxPieceBytes bounds the pieces remembered: a long one (a run of letters
// with no space) is rarely seen twice.
const maxPieceBytes = 64

// remember puts piece's count in memory when it is short enough.
func remember(memory *countCache, piece string, n int64) {
	if len(piece) <= maxPieceBytes {
		memory.put(piece, n)
	}
}

// shortIdx recycles the piece ranges of short counts, up to maxPooledPieces
// each (64 KiB): a text of many tiny pieces would otherwise leave a buffer
// of up to 512 KiB in the pool for every call that was in flight at once.
var shortIdx = sync.Pool{New: func() any { return new([][2]int) }}

const maxPooledPieces = 4096

// countShort counts a text of chunkAbove bytes or less from its pieces,
// each looked up in v's memory or encoded alone, when at least three in
// four are there; by Count whole otherwise. The sum is the same: the
// tokenizer encodes each piece on its own.
func countShort(c *codec.Codec, v vocab, text string) int64 {
	// Count encodes a piece's runes back to UTF-8, so an invalid byte
	// becomes U+FFFD there and the pieces are not slices of the text.
	if !utf8.ValidString(text) {
		return countWhole(c, text)
	}
	buf := shortIdx.Get().(*[][2]int)
	idx := v.pieces(text, (*buf)[:0])
	defer func() {
		if cap(idx) <= maxPooledPieces {
			*buf = idx[:0]
			shortIdx.Put(buf)
		}
	}()
	var n int64
	misses := 0
	for i, m := range idx {
		if k, ok := v.memory.lookup(text[m[0]:m[1]]); ok {
			n += k
			idx[i][1] = -1 // counted
		} else {
			misses++
		}
	}
	if 4*misses > len(idx) {
		learned := 0
		for _, m := range idx {
			if m[1] >= 0 && learned < learnPieces {
				piece := text[m[0]:m[1]]
				if k, ok := encodePiece(c, v, piece); ok {
					remember(v.memory, piece, k)
				}
				learned++
			}
		}
		return countWhole(c, text)
	}
	for _, m := range idx {
		if m[1] < 0 {
			continue
		}
		piece := text[m[0]:m[1]]
		k, ok := encodePiece(c, v, piece)
		if !ok {
			return countWhole(c, text)
		}
		remember(v.memory, piece, k)
		n += k
	}
	return n
}

// pieceCounter counts the chunks of one text in one vocabulary, remembering
// the count of each distinct piece. Not safe for concurrent use.
type pieceCounter struct {
	c    *codec.Codec
	v    vocab
	idx  [][2]int         // the current chunk's pieces, reused
	seen map[string]int64 // piece → its tokens; keys are slices of the text
	// off is set once a chunk had mostly new pieces (or one could not be
	// counted so): the rest of the text is counted by Count.
	off bool
}

// maxPieces bounds the pieces a text remembers (about 2 MB).
const maxPieces = 1 << 15

var seenPool = sync.Pool{New: func() any { return make(map[string]int64) }}

func newPieceCounter(c *codec.Codec, v vocab) *pieceCounter {
	return &pieceCounter{c: c, v: v, seen: seenPool.Get().(map[string]int64)}
}

// release returns the map, emptied: its keys point into the text.
func (p *pieceCounter) release() {
	clear(p.seen)
	seenPool.Put(p.seen)
	p.seen = nil
}

// count returns chunk's tokens.
func (p *pieceCounter) count(chunk string) int64 {
	if !p.off {
		n, fresh, total, ok := p.countPieces(chunk)
		// A piece seen before costs a fraction of what Count spends on
		// it, a new one about twice: a chunk of mostly new pieces (hashes,
		// base64, random text) says the rest will be alike.
		p.off = !ok || 2*fresh > total
		if ok {
			return n
		}
	}
	return countWhole(p.c, chunk)
}

// countPieces counts chunk piece by piece, saying how many pieces it found
// and how many of them were new; ok is false when it cannot be sure of the
// library's count and Count must do it.
func (p *pieceCounter) countPieces(chunk string) (n int64, fresh, total int, ok bool) {
	// Count encodes a piece's runes back to UTF-8, so an invalid byte
	// becomes U+FFFD there and the pieces are not slices of the text.
	if !utf8.ValidString(chunk) {
		return 0, 0, 0, false
	}
	idx := p.v.pieces(chunk, p.idx[:0])
	p.idx = idx
	for _, m := range idx {
		piece := chunk[m[0]:m[1]]
		k, ok := p.seen[piece]
		if !ok {
			if k, ok = p.v.memory.lookup(piece); !ok {
				if k, ok = encodePiece(p.c, p.v, piece); !ok {
					return 0, 0, 0, false
				}
				remember(p.v.memory, piece, k)
				fresh++
			}
			if len(p.seen) < maxPieces {
				p.seen[piece] = k
			}
		}
		n += k
	}
	return n, fresh, len(idx), true
}

// encodePiece returns the tokens the tokenizer encodes piece into; ok is
// false when v does not find piece alone as one piece (then Count of it
// would split it, and its sum need not be piece's encoding).
func encodePiece(c *codec.Codec, v vocab, piece string) (int64, bool) {
	var one [2][2]int
	if idx := v.pieces(piece, one[:0]); len(idx) != 1 || idx[0] != [2]int{0, len(piece)} {
		return 0, false
	}
	n, err := c.Count(piece)
	if err != nil {
		return 0, false
	}
	return int64(n), true
}
