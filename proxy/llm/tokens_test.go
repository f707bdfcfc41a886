package llm

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
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
						if got, want := countIn(enc, text), tokenize(enc, text); got != want {
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

// A text held as bytes counts as the same text as a string, and once
// counted it is found again without an allocation (the body's bytes are
// never converted to look it up).
func TestCountBytesInIsCountIn(t *testing.T) {
	for _, enc := range []Encoding{O200kBase, Cl100kBase} {
		for _, text := range []string{"", "user", "assistant", "Hello there, mock!", strings.Repeat("ab ", 9000)} {
			b := []byte(text)
			if got, want := countBytesIn(enc, b), countIn(enc, text); got != want {
				t.Errorf("%s %.20q: got %d, want %d", enc, text, got, want)
			}
			if len(text) > maxCachedText {
				continue // never cached: counted each time
			}
			if allocs := testing.AllocsPerRun(20, func() { countBytesIn(enc, b) }); allocs != 0 {
				t.Errorf("%s %.20q: %v allocations a count, want 0", enc, text, allocs)
			}
		}
	}
}
