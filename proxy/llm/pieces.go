package llm

import (
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"github.com/tiktoken-go/tokenizer/codec"
)

// The tokenizer's Count allocates a match object of a few hundred bytes for
// every piece its pre-tokenizer regexp finds, and a string for the piece:
// ~57 MB for a MiB of prose, which keeps the collector running while large
// prompts are counted, and the small calls beside them pay for it. A long
// text is counted here instead from the pieces' byte ranges (o200k's found
// by o200kPieces, the same scan written out; cl100k's by the same regexp's
// index scan, which reuses one match), and each distinct piece of the text
// is encoded once (by Count, on the piece alone) and then looked up: the
// same sum, since the tokenizer encodes every piece on its own.
//
// The patterns are the library's (codec.NewO200kBase, codec.NewCl100kBase),
// byte for byte, so that regexp2 runs the matchers the library generated
// for them; TestChunkedCountIsExact and FuzzChunkedCount compare the counts
// with the library's Count, and would catch a pattern that drifted.
const (
	o200kPattern  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var (
	o200kSplit  = sync.OnceValue(func() *regexp2.Regexp { return regexp2.MustCompile(o200kPattern, regexp2.None) })
	cl100kSplit = sync.OnceValue(func() *regexp2.Regexp { return regexp2.MustCompile(cl100kPattern, regexp2.None) })
)

// splitter appends the byte ranges of s's pieces (s valid UTF-8) to dst.
type splitter func(s string, dst [][2]int) ([][2]int, error)

// splitO200k is o200k's splitter.
func splitO200k(s string, dst [][2]int) ([][2]int, error) { return o200kPieces(s, dst), nil }

// regexpSplitter is a splitter on re's index scan.
func regexpSplitter(re *regexp2.Regexp) splitter {
	// perByte is the last text's pieces per byte: the scan's result is
	// sized from it (grown by appends instead, it allocates twice what it
	// keeps).
	var perByte float64
	return func(s string, dst [][2]int) ([][2]int, error) {
		idx, err := findAll(re, s, &perByte)
		for _, m := range idx {
			dst = append(dst, [2]int{m[0], m[1]})
		}
		return dst, err
	}
}

// findAll is re's FindAllStringIndex of s, sized from *perByte.
func findAll(re *regexp2.Regexp, s string, perByte *float64) ([][]int, error) {
	if *perByte > 0 && len(s) > 0 {
		// Given a count, the scan allocates that much and stops there:
		// when it found as many as asked, the count may have cut it short.
		want := int(float64(len(s))**perByte*1.25) + 64
		idx, err := re.FindAllStringIndex(s, want)
		if err != nil || len(idx) < want {
			*perByte = float64(len(idx)) / float64(len(s))
			return idx, err
		}
	}
	idx, err := re.FindAllStringIndex(s, -1)
	if len(s) > 0 {
		*perByte = float64(len(idx)) / float64(len(s))
	}
	return idx, err
}

// o200kPieceCounts is the process's memory of o200k pieces' tokens: the
// words and spaces of one prompt are mostly those of the prompts before
// it, and a piece found here is not encoded again. Bounded as the text
// counts are (countCache).
var o200kPieceCounts countCache

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

// shortIdx recycles the piece ranges of short counts.
var shortIdx = sync.Pool{New: func() any { return new([][2]int) }}

// countShort counts a text of chunkAbove bytes or less in o200k from its
// pieces, each looked up in o200kPieceCounts or encoded alone, when at
// least three in four are there; by Count whole otherwise. The sum is the
// same: the tokenizer encodes each piece on its own.
func countShort(c *codec.Codec, text string) int64 {
	// Count encodes a piece's runes back to UTF-8, so an invalid byte
	// becomes U+FFFD there and the pieces are not slices of the text.
	if !utf8.ValidString(text) {
		return countWhole(c, text)
	}
	buf := shortIdx.Get().(*[][2]int)
	idx := o200kPieces(text, (*buf)[:0])
	defer func() {
		*buf = idx[:0]
		shortIdx.Put(buf)
	}()
	var n int64
	misses := 0
	for i, m := range idx {
		if k, ok := o200kPieceCounts.lookup(text[m[0]:m[1]]); ok {
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
				if k, ok := encodePiece(c, splitO200k, piece); ok {
					remember(&o200kPieceCounts, piece, k)
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
		k, ok := encodePiece(c, splitO200k, piece)
		if !ok {
			return countWhole(c, text)
		}
		remember(&o200kPieceCounts, piece, k)
		n += k
	}
	return n
}

// pieceCounter counts the chunks of one text in one vocabulary, remembering
// the count of each distinct piece. Not safe for concurrent use.
type pieceCounter struct {
	c     *codec.Codec
	split splitter
	// memory, when set, is the process's memory of the vocabulary's
	// pieces, asked before a piece new to this text is encoded.
	memory *countCache
	idx    [][2]int         // the current chunk's pieces, reused
	seen   map[string]int64 // piece → its tokens; keys are slices of the text
	// off is set once a chunk had mostly new pieces (or one could not be
	// counted so): the rest of the text is counted by Count.
	off bool
}

// maxPieces bounds the pieces a text remembers (about 2 MB).
const maxPieces = 1 << 15

var seenPool = sync.Pool{New: func() any { return make(map[string]int64) }}

func newPieceCounter(c *codec.Codec, split splitter) *pieceCounter {
	return &pieceCounter{c: c, split: split, seen: seenPool.Get().(map[string]int64)}
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
	idx, err := p.split(chunk, p.idx[:0])
	p.idx = idx
	if err != nil {
		return 0, 0, 0, false
	}
	for _, m := range idx {
		piece := chunk[m[0]:m[1]]
		k, ok := p.seen[piece]
		if !ok {
			if p.memory != nil {
				k, ok = p.memory.lookup(piece)
			}
			if !ok {
				if k, ok = encodePiece(p.c, p.split, piece); !ok {
					return 0, 0, 0, false
				}
				if p.memory != nil {
					remember(p.memory, piece, k)
				}
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
// false when split does not find piece alone as one piece (then Count of it
// would split it, and its sum need not be piece's encoding).
func encodePiece(c *codec.Codec, split splitter, piece string) (int64, bool) {
	var one [2][2]int
	idx, err := split(piece, one[:0])
	if err != nil || len(idx) != 1 || idx[0] != [2]int{0, len(piece)} {
		return 0, false
	}
	n, err := c.Count(piece)
	if err != nil {
		return 0, false
	}
	return int64(n), true
}
