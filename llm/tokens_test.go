package llm

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEncodingFor(t *testing.T) {
	tests := []struct {
		model string
		want  Encoding
	}{
		{"gpt-4o", O200kBase},
		{"gpt-4o-mini-2024-07-18", O200kBase},
		{"chatgpt-4o-latest", O200kBase},
		{"gpt-4.1-nano", O200kBase},
		{"gpt-5", O200kBase},
		{"o1-mini", O200kBase},
		{"o3", O200kBase},
		{"o4-mini", O200kBase},
		{"ft:gpt-4o-mini:acme::abc", O200kBase},
		{"openai/gpt-4o", O200kBase},
		{"GPT-4o", O200kBase},
		{"gpt-4", Cl100kBase},
		{"gpt-4-turbo", Cl100kBase},
		{"gpt-4-0613", Cl100kBase},
		{"gpt-3.5-turbo", Cl100kBase},
		{"gpt-35-turbo", Cl100kBase},
		{"text-embedding-3-small", Cl100kBase},
		{"text-embedding-ada-002", Cl100kBase},
		{"ft:gpt-3.5-turbo:acme::x", Cl100kBase},
		{"llama-3-70b", O200kBase},
		{"claude-sonnet-4", O200kBase},
		{"", O200kBase},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			if got := EncodingFor(tt.model); got != tt.want {
				t.Errorf("EncodingFor(%q) = %s, want %s", tt.model, got, tt.want)
			}
		})
	}
}

func TestCountTokens(t *testing.T) {
	// The cl100k counts are the ones OpenAI's cookbook prints with tiktoken;
	// the special-token row pins that text is never read as a control token.
	tests := []struct {
		model, text string
		want        int64
	}{
		{"gpt-4o", "", 0},
		{"gpt-4o", "hello world", 2},
		{"gpt-4", "hello world", 2},
		{"gpt-4", "tiktoken is great!", 6},
		{"gpt-4", "antidisestablishmentarianism", 6},
		{"gpt-4o", "<|endoftext|>", 7}, // special tokens count as plain text
	}
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.text, func(t *testing.T) {
			if got := CountTokens(tt.model, tt.text); got != tt.want {
				t.Errorf("CountTokens(%q, %q) = %d, want %d", tt.model, tt.text, got, tt.want)
			}
		})
	}
}

func TestCountTokensConcurrent(t *testing.T) {
	want := CountTokens("gpt-4o", prompt1KB)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		model := "gpt-4o"
		if i%2 == 1 {
			model = "gpt-4"
		}
		wg.Go(func() {
			for range 20 {
				got := CountTokens(model, prompt1KB)
				if model == "gpt-4o" && got != want {
					errs <- "got " + strconv.FormatInt(got, 10) + ", want " + strconv.FormatInt(want, 10)
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

// TestCountTokensOffline runs the count in a child process whose home and
// cache directories are an empty temporary directory and whose HTTP proxy
// is a closed port: the vocabularies must come from the binary, and nothing
// may be written to or read from a cache.
func TestCountTokensOffline(t *testing.T) {
	if os.Getenv("LLM_OFFLINE_CHILD") == "1" {
		os.Stdout.WriteString(strconv.FormatInt(CountTokens("gpt-4o", "hello world"), 10) + " " +
			strconv.FormatInt(CountTokens("gpt-4", "hello world"), 10))
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCountTokensOffline$", "-test.count=1")
	cmd.Env = []string{
		"LLM_OFFLINE_CHILD=1",
		"HOME=" + dir, "XDG_CACHE_HOME=" + dir, "TIKTOKEN_CACHE_DIR=" + dir, "DATA_GYM_CACHE_DIR=" + dir,
		"TMPDIR=" + dir,
		"HTTP_PROXY=http://127.0.0.1:1", "HTTPS_PROXY=http://127.0.0.1:1", "NO_PROXY=",
		"PATH=" + os.Getenv("PATH"),
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s", err, stdout.String())
	}
	if !bytes.HasPrefix(stdout.Bytes(), []byte("2 2")) {
		t.Errorf("child printed %q, want counts \"2 2\" first", stdout.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("child wrote %d entries to the empty home/cache dir (first %q), want none", len(entries), entries[0].Name())
	}
}

// The counts the cache remembers are the tokenizer's, per vocabulary,
// however often a text comes back, from many goroutines at once.
func TestCountCacheIsExact(t *testing.T) {
	texts := []string{"hello world", "tiktoken is great!", "Hello there, mock!", " ", "\n\n", "日本語のテキスト",
		"antidisestablishmentarianism", `{"type":"function","function":{"name":"f"}}`, strings.Repeat("word ", maxCachedText/5+1)}
	for i := range 200 {
		texts = append(texts, "message number "+strconv.Itoa(i)+" of a long conversation, resent on every turn")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 {
				for _, text := range texts {
					for _, enc := range []Encoding{O200kBase, Cl100kBase} {
						if got, want := countIn(enc, text, Pace{}), tokenize(enc, text, Pace{}); got != want {
							t.Errorf("round %d, %s, %.40q: got %d, want %d", round, enc, text, got, want)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
}

// The cache keeps within its bound while texts come and go, never keeps a
// text past maxCachedText, and a text in use is counted once however many
// others pass.
func TestCountCacheBound(t *testing.T) {
	var c countCache
	counted := map[string]int{}
	count := func(text string) int64 {
		return c.count(text, func() int64 { counted[text]++; return int64(len(text)) })
	}
	const hot = "a system prompt every call sends"
	for i := range 100000 {
		text := "text " + strconv.Itoa(i) + strings.Repeat(".", i%200)
		if got := count(text); got != int64(len(text)) {
			t.Fatalf("%q: got %d, want %d", text, got, len(text))
		}
		if i%1000 == 0 {
			count(hot)
		}
	}
	if counted[hot] != 1 {
		t.Errorf("the text in use was counted %d times, want once", counted[hot])
	}
	long := strings.Repeat("x", maxCachedText+1)
	count(long)
	count(long)
	if counted[long] != 2 {
		t.Errorf("a text past maxCachedText was counted %d times in two calls, want 2", counted[long])
	}
	for i := range c.shards {
		s := &c.shards[i]
		for _, m := range []map[string]int64{s.cur, s.old} {
			size := 0
			for text := range m {
				size += len(text) + entryOverhead
			}
			if size > shardBytes+maxCachedText+entryOverhead {
				t.Errorf("shard %d: a generation of %d bytes, past the bound", i, size)
			}
		}
	}
}

// chunkTexts are texts whose chunked count must be the tokenizer's: prose,
// other scripts, marks, code, contractions and digits around the cuts,
// whitespace runs, invalid UTF-8, and runs with no cut at all.
func chunkTexts() map[string]string {
	return map[string]string{
		"english":      prompt1KB,
		"contractions": strings.Repeat("it's what they'd DON'T we've I'M you're 'tis l'été o'clock ", 40),
		"code": strings.Repeat("func (c *Codec) Count(input string) (int, error) {\n\tif x>=0&&y<2 {return n+1}\n}\n"+
			`{"role":"user","content":"hi\n\tthere","k":[1,22,333,4444]}`+"\r\n", 30),
		"multilingual": strings.Repeat("Grüße aus Köln; naïve café résumé. Привет, мир! 日本語のテキストです。 مرحبا بالعالم "+
			"देवनागरी लिपि x\u0301y\u0308z ÅngströmABCdef ǅemal ", 30),
		"whitespace":  strings.Repeat("word  \t  word\n\n\n  word   \r\n\r\nword\u00a0\u2003word \n ", 60),
		"digits":      strings.Repeat("abc123456 x1y22z333 v1.2.3 3.14159e10 ", 80),
		"invalid":     strings.Repeat("valid \xff\xfe bytes a\x80b c\xe2\x82 d\xf0\x9f end ", 60),
		"punctuation": strings.Repeat("a.b,c;d:e!f?g(h)i[j]k{l}m<n>o/p\\q|r-s_t+u=v*w&x^y%z$a#b@c~d`e\"f ", 40),
		"letters":     strings.Repeat("abcdefghijklmnopqrstuvwxyz", 3000), // no cut at all
		"cjk":         strings.Repeat("漢字かな交じり文", 3000),                   // nor here
		"cjk-punctuated": strings.Repeat("漢字かな交じり文です。「引用」、そして１２３と全角ＡＢＣ！　"+
			"中文的句子，包括标点符号；还有“引号”和（括号）。한국어 텍스트입니다. ไทยไม่มีช่องว่าง ", 200),
		"mixed": strings.Repeat("abc", 500) + " " + strings.Repeat("漢", 3000) + strings.Repeat("word ", 2000),
	}
}

// The chunked count adds up to the tokenizer's count of the whole text,
// for both vocabularies, with chunks small enough to cut at most places
// nextCut allows, and with the sizes the gateway uses.
func TestChunkedCountIsExact(t *testing.T) {
	for name, text := range chunkTexts() {
		for _, enc := range []Encoding{O200kBase, Cl100kBase} {
			want := countWhole(codecOf(enc), text)
			for _, size := range []int{1, 2, 7, 64, 1000, chunkBytes} {
				if got := countChunked(enc, text, 0, size, Pace{}); got != want {
					t.Errorf("%s, %s: chunks of %d bytes count %d, the whole text %d", name, enc, size, got, want)
				}
			}
		}
	}
}

// FuzzChunkedCount: whatever the text, the chunked count is the whole's.
func FuzzChunkedCount(f *testing.F) {
	for _, text := range chunkTexts() {
		f.Add(text[:min(len(text), 300)], 3)
	}
	f.Add("a'b a's A'S a\u0301 a.b a\nb a\r\n\r\nb a  b a1 a/b", 1)
	f.Fuzz(func(t *testing.T, text string, size int) {
		size = 1 + abs(size)%64
		for _, enc := range []Encoding{O200kBase, Cl100kBase} {
			if got, want := countChunked(enc, text, 0, size, Pace{}), countWhole(codecOf(enc), text); got != want {
				t.Fatalf("%s: %q in chunks of %d counts %d, whole %d", enc, text, size, got, want)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func TestNextCut(t *testing.T) {
	tests := []struct {
		text string
		from int
		want int
	}{
		{"hello world", 0, 5},
		{"hello world", 6, -1}, // "world" ends the text
		{"hello, world", 0, 5},
		{"don't stop", 0, 5},                 // not at the apostrophe: "'t" joins "don"
		{"ab1 cd", 0, 2},                     // a digit after a letter
		{"12 34", 0, -1},                     // no letter before
		{"é x", 0, 2},                        // a letter, not ASCII
		{"aé x", 0, 3},                       // a word ending in one
		{"日本語。かな", 0, len("日本語")},            // CJK: before its punctuation
		{"日本語、「かな」", 0, len("日本語")},          // and its quotes
		{"かな1", 0, len("かな")},                // a digit after a letter
		{"日本　x", 0, len("日本")},               // an ideographic space
		{"日本語", 0, -1},                       // letters only
		{"日本語\xe3\x80", 0, -1},               // a truncated sequence after the letters
		{"\xe8\xaa\x9e,", 0, 3},              // a whole letter before the comma
		{"\xaa\x9e,", 0, -1},                 // continuation bytes only before it
		{"مَرْحَبًا x", 0, len("مَرْحَبًا")}, // Arabic: not within its marks
		{"한국어입니다. x", 0, len("한국어입니다")},      // Hangul
		{"a\u0301 b", 0, -1},                 // a combining mark after the letter
		{"x\ny", 0, 1},                       // a newline after a letter
		{"  a  b", 0, 3},                     // the first after from
		{"  a  b", 4, -1},                    // none after from
		{"abc def", 100, -1},                 // from past the end
		{"a b", 0, 1},                        // at 1, never 0
		{"\xffa b", 0, 2},                    // invalid UTF-8 before
		{"a\xff b", 0, -1},                   // invalid UTF-8 after the letter
		{"Q-Z", 1, 1},                        // from itself
		{"日本a:b", 0, len("日本a")},             // after a multi-byte rune
	}
	// A long text in scripts without spaces is cut near every chunk's
	// size, so its count gives up the core between chunks as English does.
	cjk := chunkTexts()["cjk-punctuated"]
	for from := chunkBytes; from < len(cjk)-chunkBytes; from += chunkBytes {
		if i := nextCut(cjk, from); i < from || i > from+100 {
			t.Fatalf("CJK text of %d bytes: the cut after %d is at %d, want within 100 bytes", len(cjk), from, i)
		}
	}
	for _, tt := range tests {
		if got := nextCut(tt.text, tt.from); got != tt.want {
			t.Errorf("nextCut(%q, %d) = %d, want %d", tt.text, tt.from, got, tt.want)
		}
	}
}

// A text long enough to be chunked counts through CountTokens what the
// tokenizer counts for it whole.
func TestLongTextCountIsTheTokenizers(t *testing.T) {
	text := longText(200 << 10)
	for _, model := range []string{"gpt-4o", "gpt-4"} {
		want, err := codecOf(EncodingFor(model)).Count(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := CountTokens(model, text); got != int64(want) {
			t.Errorf("CountTokens(%s, %d bytes) = %d, the tokenizer counts %d", model, len(text), got, want)
		}
	}
}

// longText is n bytes of prose, code and other scripts.
func longText(n int) string {
	var b strings.Builder
	texts := chunkTexts()
	for b.Len() < n {
		for _, name := range []string{"english", "code", "multilingual", "contractions", "whitespace"} {
			b.WriteString(texts[name])
		}
	}
	return b.String()
}

// A long text of prose is counted from the regexp's index scan, not by a
// match object per piece: tens of allocations per chunk where the
// library's Count makes several per piece.
func TestLongTextCountsWithoutAMatchPerPiece(t *testing.T) {
	text := strings.Repeat(prompt1KB, 256) // 256 KiB, ~16 chunks
	pieces, err := o200kSplit().FindAllStringIndex(text, -1)
	if err != nil {
		t.Fatal(err)
	}
	CountTokens("gpt-4o", text) // the pools and the vocabulary
	allocs := testing.AllocsPerRun(5, func() { CountTokens("gpt-4o", text) })
	if allocs > float64(len(pieces))/20 {
		t.Errorf("counting %d bytes (%d pieces) made %.0f allocations, want under %d", len(text), len(pieces), allocs, len(pieces)/20)
	}
}

// A text held as bytes counts as the same text as a string, and once
// counted it is found again without an allocation (the body's bytes are
// never converted to look it up).
func TestCountBytesInIsCountIn(t *testing.T) {
	for _, enc := range []Encoding{O200kBase, Cl100kBase} {
		for _, text := range []string{"", "user", "assistant", "Hello there, mock!", strings.Repeat("ab ", 9000)} {
			b := []byte(text)
			if got, want := countBytesIn(enc, b, Pace{}), countIn(enc, text, Pace{}); got != want {
				t.Errorf("%s %.20q: got %d, want %d", enc, text, got, want)
			}
			if len(text) > maxCachedText {
				continue // never cached: counted each time
			}
			if allocs := testing.AllocsPerRun(20, func() { countBytesIn(enc, b, Pace{}) }); allocs != 0 {
				t.Errorf("%s %.20q: %v allocations a count, want 0", enc, text, allocs)
			}
		}
	}
}

// pacedClock is a Pace's clock for tests: every reading moves it on by
// step (so each chunk seems to take step), and a sleep moves it by what
// was asked plus overrun of that (sleeps are rarely exact).
type pacedClock struct {
	t       time.Time
	step    time.Duration
	overrun float64
	asked   []time.Duration // each sleep asked for
	slept   time.Duration   // what the sleeps took
}

func (c *pacedClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

func (c *pacedClock) sleep(d time.Duration) {
	c.asked = append(c.asked, d)
	took := d + time.Duration(float64(d)*c.overrun)
	c.slept += took
	c.t = c.t.Add(took)
}

func TestPaceTakesItsShare(t *testing.T) {
	text := strings.Repeat(prompt1KB, 256) // 256 KiB: 64 chunks of 4 KiB
	want := countWhole(o200k(), text)
	for _, tc := range []struct {
		share, overrun float64
	}{{0.5, 0}, {0.5, 0.3}, {0.25, 0.1}, {0.8, 2}} {
		c := &pacedClock{t: time.Unix(0, 0), step: 300 * time.Microsecond, overrun: tc.overrun}
		pace := Pace{Share: tc.share, Now: c.now, Sleep: c.sleep}
		if got := countChunked(O200kBase, text, 0, 4096, pace); got != want {
			t.Fatalf("share %v: counted %d tokens at pace, %d at once", tc.share, got, want)
		}
		chunks := 0
		for rest := text; ; chunks++ {
			i := nextCut(rest, 4096)
			if i < 0 {
				break
			}
			rest = rest[i:]
		}
		work := time.Duration(chunks) * c.step
		owed := time.Duration(float64(work) * (1 - tc.share) / tc.share)
		// What the pauses took, as the count measured them (each pause's
		// two clock readings add a step), is what the chunks owed, less
		// what was still owed at the end (under pacePause) and more the
		// last pause's overrun.
		measured := c.slept + time.Duration(len(c.asked))*c.step
		slack := pacePause + time.Duration(float64(pacePause)*tc.overrun) + 2*c.step
		if d := measured - owed; d < -slack || d > slack {
			t.Errorf("share %v, overrun %v: %d chunks of %v owed %v of pauses, they took %v (%d pauses)",
				tc.share, tc.overrun, chunks, c.step, owed, measured, len(c.asked))
		}
		for _, d := range c.asked {
			if d < pacePause-2*c.step {
				t.Errorf("share %v: a pause of %v, shorter than %v", tc.share, d, pacePause)
			}
		}
	}
}

func TestZeroPaceNeverPauses(t *testing.T) {
	text := strings.Repeat(prompt1KB, 64)
	for _, share := range []float64{0, 1, 1.5, -1} {
		c := &pacedClock{t: time.Unix(0, 0), step: time.Millisecond}
		countChunked(O200kBase, text, 0, 1024, Pace{Share: share, Now: c.now, Sleep: c.sleep})
		if len(c.asked) != 0 {
			t.Errorf("share %v paused %d times", share, len(c.asked))
		}
	}
}
