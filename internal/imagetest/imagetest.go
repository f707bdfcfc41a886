// Package imagetest makes images for tests of what LLM calls with image
// parts cost.
package imagetest

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"testing"
)

// PNGDataURL is a w×h PNG as a data URL, as a chat message's image part
// carries it.
func PNGDataURL(t testing.TB, w, h int) string {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}
