package llm

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Speech bills two ways. tts-1 and tts-1-hd bill per input character; a
// token policy counts each character as a token. gpt-4o-*-tts models bill
// the input's tokens and the audio's output tokens, which the answer (audio
// bytes) does not report: the call reserves and is charged its input plus
// the most audio its input can make, at SpeechTokensPerChar.

// SpeechTokensPerChar is the most audio output tokens one input character
// makes, the stated worst case: speech of about 15 characters a second at
// the slowest speed (0.25), at 1,250 audio tokens a minute, is 5.6.
const SpeechTokensPerChar = 8

// maxSpeechChars is the longest input OpenAI takes.
const maxSpeechChars = 4096

// ttsPrices are tts-1's prices, micro-dollars per thousand characters.
var ttsPrices = map[string]int64{"tts-1": 15_000, "tts-1-hd": 30_000}

type wireSpeech struct {
	Model        string  `json:"model"`
	Input        *string `json:"input"`
	Instructions *string `json:"instructions"`
}

func parseSpeech(body []byte, rename Rename, models Models, pace Pace) (Request, error) {
	var w wireSpeech
	if err := decodeObject(body, &w); err != nil {
		return Request{}, invalid(Speech, err)
	}
	var err error
	if w.Model, err = rename.model(w.Model); err != nil {
		return Request{}, err
	}
	if w.Input == nil {
		return Request{}, invalid(Speech, fmt.Errorf("input is required"))
	}
	chars := int64(utf8.RuneCountInString(*w.Input))
	if chars > maxSpeechChars {
		return Request{}, invalid(Speech, fmt.Errorf("input is %d characters, past the %d a call takes", chars, maxSpeechChars))
	}
	r := Request{Model: w.Model, Family: models.For(w.Model), Choices: 1, HasCap: true, NoUsage: true}
	if per, ok := ttsPrices[w.Model]; ok {
		r.PromptTokens = chars
		r.UnitMicroUSD = (chars*per + 999) / 1000
		return r, nil
	}
	if !strings.HasPrefix(w.Model, "gpt-4o-") || !strings.HasSuffix(w.Model, "-tts") {
		return Request{}, invalid(Speech, fmt.Errorf("model %q is no speech model the gateway can bound (tts-1, tts-1-hd, gpt-4o-*-tts)", w.Model))
	}
	c := counter{model: w.Model, family: r.Family, pace: pace}
	c.text(*w.Input)
	if w.Instructions != nil {
		c.text(*w.Instructions)
	}
	r.PromptTokens, r.MaxOutput = c.n, chars*SpeechTokensPerChar
	return r, nil
}
