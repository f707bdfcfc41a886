package llm

import (
	"flag"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/dlclark/regexp2/v2"
	"unicode/utf8"
)

// The patterns are the library's (codec.NewO200kBase, codec.NewCl100kBase),
// byte for byte, so that regexp2 runs the matchers the library generated
// for them: what the scans stand in for.
const (
	o200kPattern  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var (
	o200kSplit  = sync.OnceValue(func() *regexp2.Regexp { return regexp2.MustCompile(o200kPattern, regexp2.None) })
	cl100kSplit = sync.OnceValue(func() *regexp2.Regexp { return regexp2.MustCompile(cl100kPattern, regexp2.None) })
)

// vocabularies are the two scans, each with the regexp whose generated
// matcher it stands in for.
var vocabularies = []struct {
	name   string
	pieces func(string, [][2]int) [][2]int
	re     func() *regexp2.Regexp
}{
	{"o200k", o200kPieces, o200kSplit},
	{"cl100k", cl100kPieces, cl100kSplit},
}

// regexpPieces is what a scan stands in for: regexp2's scan with the
// library's generated matcher.
func regexpPieces(t testing.TB, re *regexp2.Regexp, s string) [][2]int {
	t.Helper()
	idx, err := re.FindAllStringIndex(s, -1)
	if err != nil {
		t.Fatalf("regexp2: %v", err)
	}
	out := make([][2]int, len(idx))
	for i, m := range idx {
		out[i] = [2]int{m[0], m[1]}
	}
	return out
}

// checkPieces compares both scans of s with regexp2's.
func checkPieces(t testing.TB, s string) bool {
	t.Helper()
	for _, v := range vocabularies {
		got, want := v.pieces(s, nil), regexpPieces(t, v.re(), s)
		if slices.Equal(got, want) {
			continue
		}
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Errorf("%s, %q: piece %d is %q at %v, regexp2's %q at %v", v.name, s, i, s[got[i][0]:got[i][1]], got[i], s[want[i][0]:want[i][1]], want[i])
				return false
			}
		}
		t.Errorf("%s, %q: %d pieces, regexp2 %d", v.name, s, len(got), len(want))
		return false
	}
	return true
}

// allRunes sends every rune through TestPiecesAreTheRegexps (about 40 s
// on a quiet machine, several minutes under -race), not only those at the
// edges of the classes; worth running when Go (its Unicode tables), regexp2
// or the tokenizer library changes:
//
//	go test -run TestPiecesAreTheRegexps -pieces.allrunes ./llm/
var allRunes = flag.Bool("pieces.allrunes", false, "check the piece scans on every rune, not only at the edges of the classes")

// The runes TestPiecesAreTheRegexps checks: all of ASCII and Latin-1,
// and above it each rune whose classes differ from the rune before it, with
// its neighbours. Both sides take the classes from Go's Unicode tables, so
// a difference between them would show at such an edge.
func classEdges() []rune {
	var rs []rune
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r < 0x100 || *allRunes || classOf(r) != classOf(r-1) || unicode.IsSpace(r) != unicode.IsSpace(r-1) {
			for _, x := range []rune{r - 1, r, r + 1} {
				if utf8.ValidRune(x) && (len(rs) == 0 || x > rs[len(rs)-1]) {
					rs = append(rs, x)
				}
			}
		}
	}
	return rs
}

// Each rune, in every place the pattern treats differently: alone, in
// words before and after letters of both cases, marks and apostrophes,
// beside digits, after a space and a lead, and in runs of whitespace and
// line ends. Runes go in blocks, one string a block, so that regexp2 scans
// a long text as it does in a count.
func TestPiecesAreTheRegexps(t *testing.T) {
	templates := []string{
		"%", "a%", "A%", "%a", "%A", "%%a", "a%b", "A%b", "a%'s", "%'ll", "%'Re", " %", "! %x",
		"1%", "%1", "%%%1", " %\n", "%\n\n", "\n%", "% \t\n%x", "x  %  y", "%/\r\n", "'%", "\u0301%a",
	}
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 && !checkPieces(t, b.String()) {
			t.FailNow()
		}
		b.Reset()
	}
	runes := classEdges()
	for _, r := range runes {
		for _, tpl := range templates {
			b.WriteString(strings.ReplaceAll(tpl, "%", string(r)))
			b.WriteByte('|')
		}
		if b.Len() > 64<<10 {
			flush()
		}
	}
	flush()
	t.Logf("%d runes", len(runes))
}

func TestPiecesEdges(t *testing.T) {
	for _, s := range []string{
		"", " ", "  ", "\n", "\r\n", " \n \n x", "  \n\n  x", "a  b", "a \t b", "a\u00a0\u00a0b", "x  ",
		"HELLO world", "HELLOworld", "hELLO", "don't", "DON'T", "we'LL", "it'ſ", "I'M", "you'RE'", "'s",
		"abc'", "abc'x", "12345678", "1a2b", "x\x7fy", "\x7f\x7f", "a!!!\n\n/b", " !?", "!abc", " \u0301\u0301a",
		"\u0301", "Ⅻ12", "ﬁne", "ǅemal", "ʰello", "日本語のテキスト", "x\u2028y", "x\u0085\u0085y", "a/\n/b",
	} {
		checkPieces(t, s)
	}
}

// Random texts from pieces that stress the alternatives' edges.
func TestPiecesRandomTexts(t *testing.T) {
	parts := []string{"a", "B", "ab", "CD", "'", "'s", "'LL", "'re", " ", "  ", "\t", "\n", "\r", "\r\n", "1", "234", "!", "?!",
		"/", "\u0301", "é", "É", "日本", "ǅ", "ʰ", "\u00a0", "\u2003", "\x7f", "ſ", "Ⅻ", "٣", "😀"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		if !checkPieces(t, b.String()) {
			return
		}
	}
}

func FuzzPieces(f *testing.F) {
	for _, s := range []string{"Hello, World! It's 2026.\n\n  Done", "HELLO'll ab'RE x\u0301y", " \n \r\n\t x/\n", "日本語 123456 ǅx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // the piece counter sends invalid text to Count whole
		}
		checkPieces(t, s)
	})
}

func BenchmarkPieces(b *testing.B) {
	text := longText(1 << 20)
	for _, v := range vocabularies {
		b.Run(v.name+"/anchor=regexp2", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				if _, err := v.re().FindAllStringIndex(text, -1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(v.name+"/hand", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			var dst [][2]int
			for b.Loop() {
				dst = v.pieces(text, dst[:0])
			}
		})
	}
}

// forgetPieces empties the process's piece memory for the test, and again
// after it.
func forgetPieces(t testing.TB) {
	o200kPieceCounts, cl100kPieceCounts = countCache{}, countCache{}
	t.Cleanup(func() { o200kPieceCounts, cl100kPieceCounts = countCache{}, countCache{} })
}

// A short text counts what the tokenizer counts whole, whether its pieces
// are new (Count whole, a few learned), known (looked up), or some of each.
func TestShortCountIsTheTokenizers(t *testing.T) {
	forgetPieces(t)
	texts := []string{}
	for _, text := range chunkTexts() {
		texts = append(texts, text[:min(len(text), chunkAbove)])
	}
	parts := []string{"the", " cat", "'s", " SAT", "\n\n", "  ", "42", "1234", "!", " é", "日本", "\u0301", "\x7f", "\xff"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		var b strings.Builder
		for range rng.IntN(60) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		texts = append(texts, b.String())
	}
	for _, enc := range []Encoding{O200kBase, Cl100kBase} {
		c, v := codecOf(enc), vocabOf(enc)
		for pass := range 3 {
			for _, text := range texts {
				if got, want := countShort(c, v, text), countWhole(c, text); got != want {
					t.Fatalf("%s, pass %d: %q counts %d, the tokenizer %d", enc, pass, text, got, want)
				}
			}
		}
	}
}

// Once the memory knows a text's pieces, the text is counted from them:
// a wrong count put there on purpose shows in the sum.
func TestShortCountUsesThePieceMemory(t *testing.T) {
	forgetPieces(t)
	c := codecOf(O200kBase)
	text := "The cat sat on the mat, and the cat's hat sat on the cat."
	want := countWhole(c, text)
	for range 4 { // learned learnPieces at a time while most are new
		if got := countShort(c, o200kVocab, text); got != want {
			t.Fatalf("counts %d, want %d", got, want)
		}
	}
	setCount(&o200kPieceCounts, " cat", 1000) // twice in the text, a token each
	if got := countShort(c, o200kVocab, text); got != want-2+2000 {
		t.Errorf("with \" cat\" remembered as 1000 tokens: %d, want %d (the memory not asked?)", got, want-2+2000)
	}
	// A text of mostly new pieces is counted whole, whatever the memory says.
	if got, want := countShort(c, o200kVocab, "zqx cat vbn mrp"), countWhole(c, "zqx cat vbn mrp"); got != want {
		t.Errorf("mostly new: %d, want Count's %d", got, want)
	}
}

// setCount overwrites text's count in c.
func setCount(c *countCache, text string, n int64) {
	s := &c.shards[maphash.String(shardSeed, text)%countShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.old, text)
	if s.cur != nil {
		delete(s.cur, text)
	}
	s.add(text, n)
}

func FuzzShortCount(f *testing.F) {
	for _, s := range []string{"Hello, World! It's 2026.", "HELLO'll ab'RE x\u0301y", " \n \r\n\t x/\n", "日本語 123456 ǅx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, enc := range []Encoding{O200kBase, Cl100kBase} {
			c, v := codecOf(enc), vocabOf(enc)
			for range 2 { // cold, then with what the first call learned
				if got, want := countShort(c, v, s), countWhole(c, s); got != want {
					t.Fatalf("%s: %q counts %d, the tokenizer %d", enc, s, got, want)
				}
			}
		}
	})
}

func BenchmarkCountShort(b *testing.B) {
	c := codecOf(O200kBase)
	text := longText(1 << 10)
	b.Run("anchor=library.Count", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			countWhole(c, text)
		}
	})
	b.Run("pieces", func(b *testing.B) {
		countShort(c, o200kVocab, text)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			countShort(c, o200kVocab, text)
		}
	})
}

// Requests count at once, sharing the memory: every count stays exact.
func TestShortCountConcurrent(t *testing.T) {
	forgetPieces(t)
	c := codecOf(O200kBase)
	texts := []string{}
	for _, text := range chunkTexts() {
		texts = append(texts, text[:min(len(text), 4<<10)])
	}
	want := make([]int64, len(texts))
	for i, text := range texts {
		want[i] = countWhole(c, text)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 32)
	for g := range 32 {
		wg.Go(func() {
			for i := range 20 {
				k := (g + i) % len(texts)
				if got := countShort(c, o200kVocab, texts[k]); got != want[k] {
					errs <- fmt.Sprintf("%q counts %d, want %d", texts[k][:20], got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
