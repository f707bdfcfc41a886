package llm

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// BenchmarkParseRequest prices the prompt count of a typical 1 KB chat
// request against an anchor: json.Unmarshal of the same body into any,
// which any gateway that reads the body pays at least.
func BenchmarkParseRequest(b *testing.B) {
	CountTokens("gpt-4o-mini", "warm up") // build the vocabulary outside the timer
	b.Run("anchor=json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(chatBody1KB)))
		b.ReportAllocs()
		for b.Loop() {
			var v any
			if err := json.Unmarshal(chatBody1KB, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ParseRequest", func(b *testing.B) {
		b.SetBytes(int64(len(chatBody1KB)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseRequest(ChatCompletions, chatBody1KB); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WithIncludeUsage", func(b *testing.B) {
		b.SetBytes(int64(len(chatBody1KB)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := WithIncludeUsage(chatBody1KB); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStreamWatcher prices watching a 200-chunk chat stream against
// copying it unwatched.
func BenchmarkStreamWatcher(b *testing.B) {
	var sb strings.Builder
	for range 200 {
		sb.WriteString(chunk(" token"))
	}
	sb.WriteString(chatUsageEvent + "data: [DONE]\n\n")
	stream := []byte(sb.String())
	buf := make([]byte, 32<<10)
	b.Run("anchor=io.Copy", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{bytes.NewReader(stream)}, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, drop := range []bool{false, true} {
		name := "watch"
		if drop {
			name = "watch+drop"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				w := NewStreamWatcher(bytes.NewReader(stream), StreamConfig{Kind: ChatCompletions, Model: "gpt-4o", DropUsageChunk: drop})
				if _, err := io.CopyBuffer(io.Discard, w, buf); err != nil {
					b.Fatal(err)
				}
				w.Delivered()
			}
		})
	}
	// enforce: stream, a window of 64 granted each time it is asked.
	b.Run("watch+enforce", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		for b.Loop() {
			m := &windowMeter{window: 64, limit: 1 << 40, granted: 64}
			w := NewStreamWatcher(bytes.NewReader(stream), StreamConfig{Kind: ChatCompletions, Model: "gpt-4o", DropUsageChunk: true, Meter: m, Granted: 64})
			if _, err := io.CopyBuffer(io.Discard, w, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCountTokens is the tokenizer's share of ParseRequest.
func BenchmarkCountTokens(b *testing.B) {
	for _, model := range []string{"gpt-4o", "gpt-4"} {
		CountTokens(model, "warm up")
		b.Run(string(EncodingFor(model)), func(b *testing.B) {
			b.SetBytes(int64(len(prompt1KB)))
			b.ReportAllocs()
			for b.Loop() {
				CountTokens(model, prompt1KB)
			}
		})
	}
}

// BenchmarkCountLongText prices counting a 1 MiB prompt (o200k) on one
// goroutine, in tokens per second per core: CountTokens (chunked) beside
// the tokenizer library's own Count of the same text whole.
func BenchmarkCountLongText(b *testing.B) {
	benchmarkCountLongText(b, prompt1KB)
	// A language written without spaces: chunks end at its punctuation.
	b.Run("ja", func(b *testing.B) { benchmarkCountLongText(b, promptJA) })
}

// promptJA is a Japanese paragraph of about 1 KB: no spaces, a 、 or 。
// every few words, a few Latin words and digits.
const promptJA = "ゲートウェイは呼び出しを転送する前に、プロンプトのすべてのトークンを数えます。" +
	"テナントが割り当てを超えて使うことはできず、制限はインスタンスをまたいで保たれます。" +
	"設定を再読み込みしても状態は失われません。Redisが落ちたときの振る舞いは、ポリシーごとに選べます。" +
	"大きなプロンプトは約16KiBずつ区切って数え、その合間にほかの小さな呼び出しが進みます。" +
	"区切りは、どちらの語彙の分割規則でも必ず切れる場所、つまり文字のあとで句読点や数字の前に置かれます。" +
	"こうして数えた合計は、全体を一度に数えた値と一致します。"

// benchmarkCountLongText counts 1 MiB of text repeated (cut on a whole
// character) with the tokenizer library's Count, the anchor, and with
// CountTokens.
func benchmarkCountLongText(b *testing.B, unit string) {
	text := strings.Repeat(unit, (1<<20)/len(unit)+1)[:1<<20]
	for !utf8.ValidString(text) {
		text = text[:len(text)-1]
	}
	c := o200k()
	tokens, err := c.Count(text)
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct {
		name  string
		count func() int64
	}{
		{"anchor=library.Count", func() int64 { n, _ := c.Count(text); return int64(n) }},
		{"CountTokens", func() int64 { return CountTokens("gpt-4o", text) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				if n := bm.count(); n != int64(tokens) {
					b.Fatalf("counted %d tokens, want %d", n, tokens)
				}
			}
			b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mtokens/s")
		})
	}
}

// BenchmarkSkipString skips 1 MiB of prompt text in one JSON string, as a
// call's walk does several times, against the byte loop it replaced.
func BenchmarkSkipString(b *testing.B) {
	s := []byte(`"` + strings.Repeat(prompt1KB, (1<<20)/len(prompt1KB)) + `"`)
	for _, bm := range []struct {
		name string
		skip func([]byte, int) int
	}{{"anchor=byte-loop", skipStringByByte}, {"skipString", skipString}} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				if bm.skip(s, 0) != len(s) {
					b.Fatal("did not reach the closing quote")
				}
			}
		})
	}
}
