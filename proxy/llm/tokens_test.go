package llm

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
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
