package llm

import (
	"bytes"
	"io"
	"testing"
)

// FuzzStreamWatcher feeds arbitrary streams, split into two reads at an
// arbitrary point, to every kind. Without DropUsageChunk the output must be
// the input; with it, the output must be the input less whole lines (what
// was dropped is never a fragment), and nothing may panic.
func FuzzStreamWatcher(f *testing.F) {
	for _, c := range sseCases {
		for _, v := range variants(c) {
			in := v.input()
			f.Add(in, uint16(len(in)/2), uint8(c.kind))
		}
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{}}\r\n\r\ndata"), uint16(3), uint8(ChatCompletions))
	f.Add([]byte("data\n\ndata:\n:\n\n\r\n"), uint16(0), uint8(Completions))
	f.Add([]byte("data: [DONE]"), uint16(7), uint8(Responses))
	f.Fuzz(func(t *testing.T, in []byte, split uint16, kind uint8) {
		k := Kind(kind%5 + 1)
		at := int(split) % (len(in) + 1)
		read := func(drop bool) ([]byte, *StreamWatcher) {
			r := io.MultiReader(bytes.NewReader(in[:at]), bytes.NewReader(in[at:]))
			w := NewStreamWatcher(r, StreamConfig{Kind: k, DropUsageChunk: drop})
			out, err := io.ReadAll(w)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			w.Usage()
			w.Delivered()
			return out, w
		}
		if out, _ := read(false); !bytes.Equal(out, in) {
			t.Fatalf("pass-through changed the stream:\n%q\nwant\n%q", out, in)
		}
		out, _ := read(true)
		if !isLineSubsequence(out, in) {
			t.Fatalf("drop mode removed more than whole lines:\n%q\nfrom\n%q", out, in)
		}
		if k != ChatCompletions && k != Completions && !bytes.Equal(out, in) {
			t.Fatalf("drop mode changed a %s stream", k)
		}
	})
}

// isLineSubsequence reports whether out is in with some whole lines
// (each with its line end) removed.
func isLineSubsequence(out, in []byte) bool {
	lines := bytes.SplitAfter(in, []byte("\n"))
	for _, l := range lines {
		out = bytes.TrimPrefix(out, l)
	}
	return len(out) == 0
}
