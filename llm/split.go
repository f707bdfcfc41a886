package llm

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// o200kPieces is the scan of o200k's pre-tokenizer pattern written out by
// hand (the pattern, byte for byte as the tokenizer library has it, is
// o200kPattern in split_test.go): the pieces that regexp2 finds with the
// matcher the library generated for that pattern, and so the pieces the
// library's Count encodes, about ten times faster; a long prompt's count
// spent nearly all its time in that scan. It follows the generated matcher
// rather than the pattern where the two part: that matcher is what the
// library runs.
//
//   - Alternatives are tried in order at each position, the first that
//     matches wins (the alternation is atomic), and a position where none
//     matches is skipped, as regexp2's scan skips it: DEL (U+007F) is in
//     none of the pattern's classes as generated, so it is in no piece.
//   - In `\s*[\r\n]+` the whitespace loop, having failed greedily, backs up
//     to the first CR or LF of the run, not the last.
//
// TestPiecesAreTheRegexps and FuzzPieces compare it with regexp2 at every
// edge of the classes (every rune with -pieces.allrunes) and on random
// text. s must be valid UTF-8 (the counters check); dst is appended to.
// It saves 38 % of an llm request's instructions on a new prompt: 305,623 → 187,898, callgrind (llm-new-prompt).
func o200kPieces(s string, dst [][2]int) [][2]int { return scanPieces(s, dst, o200kMatch) }

// cl100kPieces is o200kPieces for cl100kPattern, with the same two
// departures from the pattern (its generated matcher has them too).
func cl100kPieces(s string, dst [][2]int) [][2]int { return scanPieces(s, dst, cl100kMatch) }

// scanPieces appends the pieces match finds from the start of s on,
// skipping a rune where it finds none.
func scanPieces(s string, dst [][2]int, match func(s string, p int) int) [][2]int {
	for p := 0; p < len(s); {
		end := match(s, p)
		if end <= p {
			_, size := utf8.DecodeRuneInString(s[p:])
			p += size
			continue
		}
		dst = append(dst, [2]int{p, end})
		p = end
	}
	return dst
}

// The classes of the pattern, as bits: for ASCII from a table (the generated
// matcher's bitmaps), above from the Unicode categories.
const (
	clsUpper  = 1 << iota // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clsLower              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	clsDigit              // \p{N}
	clsLead               // [^\r\n\p{L}\p{N}]
	clsPunct              // [^\s\p{L}\p{N}]
	clsSpace              // \s
	clsLetter             // \p{L} (cl100k)
)

// asciiClass holds each ASCII character's classes. DEL is in none: the
// generated matcher's bitmaps leave it out of both negated classes.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case 'A' <= r && r <= 'Z':
			t[c] = clsUpper | clsLetter
		case 'a' <= r && r <= 'z':
			t[c] = clsLower | clsLetter
		case '0' <= r && r <= '9':
			t[c] = clsDigit
		case r == 0x7f:
		case unicode.IsSpace(r):
			t[c] = clsSpace
			if r != '\r' && r != '\n' {
				t[c] |= clsLead
			}
		default:
			t[c] = clsLead | clsPunct
		}
	}
	return t
}()

// classOf returns r's classes.
func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	var c uint8
	letter := unicode.IsLetter(r)
	if letter {
		c |= clsLetter
	}
	if letter || unicode.Is(unicode.M, r) {
		if !unicode.Is(unicode.Ll, r) {
			c |= clsUpper // Lu, Lt, Lm, Lo, M
		}
		if !unicode.In(r, unicode.Lu, unicode.Lt) {
			c |= clsLower // Ll, Lm, Lo, M
		}
	}
	digit := unicode.Is(unicode.N, r)
	if digit {
		c |= clsDigit
	}
	if !letter && !digit {
		c |= clsLead
		if unicode.IsSpace(r) {
			c |= clsSpace
		} else {
			c |= clsPunct
		}
	}
	return c
}

// bmpClass holds classOf of every rune of the Basic Multilingual Plane
// (64 KiB, made on the first long count): the Unicode tables' binary
// searches were a third of the scan's time on text in other scripts.
var bmpClass = sync.OnceValue(func() *[1 << 16]uint8 {
	var t [1 << 16]uint8
	for r := range rune(len(t)) {
		t[r] = classOf(r)
	}
	return &t
})

// runeAt returns the rune at byte i of s, its size and its classes; size 0
// at the end.
func runeAt(s string, i int) (rune, int, uint8) {
	if i >= len(s) {
		return 0, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r < 1<<16 {
		return r, size, bmpClass()[r]
	}
	return r, size, classOf(r)
}

// scan returns the end of the run of runes in class from i.
func scan(s string, i int, class uint8) int {
	for {
		_, size, c := runeAt(s, i)
		if size == 0 || c&class == 0 {
			return i
		}
		i += size
	}
}

// o200kMatch returns the end of the piece that starts at p, or -1 when no
// alternative matches there.
func o200kMatch(s string, p int) int {
	_, size, c := runeAt(s, p)
	// [^\r\n\p{L}\p{N}]? [upper]* [lower]+ contraction?
	// [^\r\n\p{L}\p{N}]? [upper]+ [lower]* contraction?
	// Each tries the optional lead rune taken, then not.
	if c&(clsLead|clsUpper|clsLower) != 0 {
		leads := [2]int{p, p}
		n := 1
		if c&clsLead != 0 {
			leads[0], n = p+size, 2
		}
		for _, q := range leads[:n] {
			if end := wordLowerLast(s, q); end >= 0 {
				return end
			}
		}
		for _, q := range leads[:n] {
			if u := scan(s, q, clsUpper); u > q {
				return contraction(s, scan(s, u, clsLower))
			}
		}
	}
	return matchRest(s, p, c, size, true)
}

// cl100kMatch is o200kMatch for cl100kPattern.
func cl100kMatch(s string, p int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if e := contraction(s, p); e > p {
		return e
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+, the lead taken, then not.
	_, size, c := runeAt(s, p)
	if c&clsLead != 0 {
		if e := scan(s, p+size, clsLetter); e > p+size {
			return e
		}
	}
	if c&clsLetter != 0 {
		return scan(s, p, clsLetter)
	}
	return matchRest(s, p, c, size, false)
}

// matchRest is the alternatives both patterns end with, from p, whose rune
// has classes c and size bytes: \p{N}{1,3}, then ' '?[^\s\p{L}\p{N}]+ and
// its line ends (and slashes, when slash: o200k), then the whitespace ones.
func matchRest(s string, p int, c uint8, size int, slash bool) int {
	// \p{N}{1,3}
	if c&clsDigit != 0 {
		end := p + size
		for range 2 {
			_, size, c := runeAt(s, end)
			if c&clsDigit == 0 {
				break
			}
			end += size
		}
		return end
	}
	// ' '?[^\s\p{L}\p{N}]+[\r\n/]*
	q := p
	if s[p] == ' ' {
		q++
	}
	if e := scan(s, q, clsPunct); e > q {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n' || slash && s[e] == '/') {
			e++
		}
		return e
	}
	if c&clsSpace == 0 {
		return -1
	}
	e := scan(s, p, clsSpace)
	// \s*[\r\n]+: from the first CR or LF of the run (see o200kPieces).
	for i := p; i < e; i++ {
		if s[i] == '\r' || s[i] == '\n' {
			for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
				i++
			}
			return i
		}
	}
	// \s+(?!\S): the run, or all of it but its last rune when a non-space
	// follows; \s+ when that leaves nothing.
	if e == len(s) {
		return e
	}
	_, last := utf8.DecodeLastRuneInString(s[p:e])
	if e-last > p {
		return e - last
	}
	return e
}

// wordLowerLast matches [upper]*[lower]+ contraction? from q, backing the
// greedy upper run off one rune at a time until a lower run can start;
// -1 when none can.
func wordLowerLast(s string, q int) int {
	u := scan(s, q, clsUpper)
	for k := u; ; {
		if l := scan(s, k, clsLower); l > k {
			return contraction(s, l)
		}
		if k == q {
			return -1
		}
		_, size := utf8.DecodeLastRuneInString(s[q:k])
		k -= size
	}
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d)? at i, as
// generated: 's and 't also match the long s (U+017F), and the letters after
// the first are ASCII.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	r, size := utf8.DecodeRuneInString(s[i+1:])
	j := i + 1 + size
	switch r {
	case 'S', 'T', 's', 't', 'ſ', 'M', 'm', 'D', 'd':
		return j
	case 'R', 'r', 'V', 'v':
		if j < len(s) && s[j]|0x20 == 'e' {
			return j + 1
		}
	case 'L', 'l':
		if j < len(s) && s[j]|0x20 == 'l' {
			return j + 1
		}
	}
	return i
}
